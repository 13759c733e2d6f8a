#include "app_main.h"

#include <cxxopts.hpp>

#include <cstdio>
#include <exception>

#include "util/error.h"
#ifndef FT_APP_WITHOUT_BLAS
#include "util/blas_kernels.h"
#endif

namespace ft::app {

int run_main(const char* program, int argc, char** argv, const std::function<int(int, char**)>& body,
             MatrixProducts matrix_products) {
#ifndef FT_APP_WITHOUT_BLAS
  // Before any work: the exec starts the program over.
  if (matrix_products == MatrixProducts::kYes) restart_with_fast_blas_kernels(argv);
#else
  (void)matrix_products;
#endif
  try {
    return body(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", program, e.message.c_str(), program);
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::fprintf(stderr, "%s: %s (see %s --help)\n", program, e.what(), program);
    return 2;
  } catch (const InternalError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 3;
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 3;
  }
}

}  // namespace ft::app
