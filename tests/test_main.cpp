// Shared main for every test binary: the same BLAS set-up as the shardlm binary, then GoogleTest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "shardlm/core/runtime.h"

int main(int argc, char** argv) {
    // --gemm auto's choices (kernels/gemm/gemm.h) go to the build tree, not the user's cache; every shardlm the
    // tests start inherits it
    setenv("SHARDLM_CACHE_DIR", SHARDLM_BINARY_DIR "/test-cache", 0);
    // Open MPI 4 puts every mpirun's session directory under <base>/ompi.<host>.<uid>/ and removes that
    // directory when its job ends and it is empty: an mpirun of another test that CTest runs at the same
    // time (ctest -j) can then fail to create its own ("A call to mkdir was unable to create the desired
    // directory", open-mpi/ompi#8510). Each test process gets a base of its own in the build tree; its
    // mpiruns run one after another. (A BLAS re-exec keeps the pid: the new image finds its own base set
    // and still removes it at the end.)
    const std::filesystem::path own_base =
        std::filesystem::path(SHARDLM_BINARY_DIR "/ompi-sessions") / std::to_string(getpid());
    setenv("OMPI_MCA_orte_tmpdir_base", own_base.c_str(), 0);
    const bool owns_base = own_base == std::getenv("OMPI_MCA_orte_tmpdir_base");
    if (owns_base) std::filesystem::create_directories(own_base);
    shardlm::ensure_blas_coretype(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    const int rc = RUN_ALL_TESTS();
    if (owns_base) {
        std::error_code ec;
        std::filesystem::remove_all(own_base, ec);
    }
    return rc;
}
