// tests/comm/comm_test.h: shared set-up of the comm tests (main_mpi.cpp owns the MpiEnv).
#pragma once
#include <gtest/gtest.h>

#include "shardlm/comm/group.h"
#include "shardlm/comm/mpi_env.h"

namespace shardlm::comm::test {

MpiEnv& env();

// Every test ends with an all-reduce of its failure flag over the world, so that a failure on any
// rank fails the test on every rank (and rank 0, the only one printing, reports it).
class CommTest : public ::testing::Test {
protected:
    Group& world() { return env().world(); }
    int rank() { return world().rank(); }
    int nranks() { return world().size(); }
    void TearDown() override {
        double failed = ::testing::Test::HasFailure() ? 1.0 : 0.0;
        world().all_reduce_max(&failed, 1);
        if (failed != 0 && !::testing::Test::HasFailure()) ADD_FAILURE() << "failed on another rank";
    }
};

}  // namespace shardlm::comm::test
