// Empty translation unit: lets ft_pch compile the shared precompiled header.
