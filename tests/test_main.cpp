// Shared main for every test binary: the same BLAS set-up as the shardlm binary, then GoogleTest.
#include <gtest/gtest.h>

#include "shardlm/core/runtime.h"

int main(int argc, char** argv) {
    shardlm::ensure_blas_coretype(argc, argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
