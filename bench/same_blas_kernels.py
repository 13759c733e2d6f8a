"""PyTorch beside ft programs on the same OpenBLAS kernels. ft programs start over with
OPENBLAS_CORETYPE set when OpenBLAS chose a slow fallback for the CPU (lib/util/blas_kernels.h);
a script that times eager PyTorch against them must do the same before it imports torch, or it
compares kernels (5x on this VM's Xeon), not frameworks."""
import os
import subprocess
import sys


def restart_with_ft_blas_kernels(build):
    """Call before `import torch`: sets OPENBLAS_CORETYPE to the build's choice and execs the
    script again, once. Does nothing when the variable is set or ft keeps OpenBLAS's own choice."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    core = subprocess.run([os.path.join(build, "bin/ft_doctor"), "--blas-core"], check=True, text=True,
                          capture_output=True).stdout.strip()
    if core:
        os.environ["OPENBLAS_CORETYPE"] = core
        os.execv(sys.executable, [sys.executable] + sys.argv)


def build_from_argv(default="build"):
    """The --build argument of the calling script, read before argparse (which runs after the restart)."""
    args = sys.argv[1:]
    for i, a in enumerate(args):
        if a == "--build" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--build="):
            return a.split("=", 1)[1]
    return default
