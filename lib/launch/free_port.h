// TCP ports for a rendezvous store about to be hosted: one nobody listens on now, and whether a
// given one is free.
#pragma once

namespace ft::launch {

// The kernel's pick of a free port (bound on all interfaces, then released). With `keep`, the
// socket stays open and listening (a port in use, as tests need) and *keep is the descriptor to
// close. Throws ft::Error when no socket can be bound.
int free_port(int* keep = nullptr);

// Whether `port` can be bound now on all interfaces (nothing listens there; a connection of a
// former listener still in TIME_WAIT does not count). True when no socket can be had to ask.
bool port_is_free(int port);

}  // namespace ft::launch
