// Shared main for every test binary: the same BLAS set-up as the shardlm binary, then GoogleTest.
#include <gtest/gtest.h>

#include <cstdlib>

#include "shardlm/core/runtime.h"

int main(int argc, char** argv) {
    // --gemm auto's choices (kernels/gemm.h) go to the build tree, not the user's cache; every shardlm the
    // tests start inherits it
    setenv("SHARDLM_CACHE_DIR", SHARDLM_BINARY_DIR "/test-cache", 0);
    shardlm::ensure_blas_coretype(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
