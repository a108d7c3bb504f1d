// tests/comm/main_mpi.cpp: test main for test_comm, run with or without mpirun.
// Only world rank 0 prints GoogleTest's output; the other ranks print just their failures, prefixed
// with their rank. The exit code is non-zero if any test failed on any rank.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm_test.h"

namespace shardlm::comm::test {

namespace {
MpiEnv* g_env = nullptr;

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
public:
    explicit RankFailurePrinter(int rank) : rank_(rank) {}
    void OnTestPartResult(const ::testing::TestPartResult& r) override {
        if (!r.failed()) return;
        std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                     r.line_number(), r.summary());
    }

private:
    int rank_;
};
}  // namespace

MpiEnv& env() { return *g_env; }

}  // namespace shardlm::comm::test

int main(int argc, char** argv) {
    using namespace shardlm::comm;
    ::testing::InitGoogleTest(&argc, argv);
    MpiEnv env(&argc, &argv);
    test::g_env = &env;
    if (env.world_rank() != 0) {
        auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new test::RankFailurePrinter(env.world_rank()));
    }
    int rc = RUN_ALL_TESTS();
    double failed = rc != 0 ? 1.0 : 0.0;
    env.world().all_reduce_max(&failed, 1);
    if (failed != 0 && rc == 0 && env.world_rank() == 0)
        std::fprintf(stderr, "test_comm: tests failed on another rank\n");
    std::fflush(stdout);
    return failed != 0 ? 1 : 0;
}
