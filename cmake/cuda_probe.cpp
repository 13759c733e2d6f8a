// Built and run at configure time (cmake/FtTorch.cmake): the versions of the CUDA runtime and
// NCCL headers ft compiles against and of the libraries it links. Needs no GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>

int main() {
  int runtime = 0;
  int nccl = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) return 1;
  if (ncclGetVersion(&nccl) != ncclSuccess) return 2;
  std::printf("cudart_header=%d cudart_library=%d nccl_header=%d nccl_library=%d\n", CUDART_VERSION, runtime,
              NCCL_VERSION_CODE, nccl);
  return 0;
}
