// Closed-form tests of the ring collectives (Flashlight/NCCL style). Run under mpirun with 2, 3 and
// 4 ranks (3 gives uneven all-reduce blocks) and without mpirun (world size 1).
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "comm_test.h"
#include "shardlm/comm/progress.h"
#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"

namespace shardlm::comm::test {
namespace {

// Sizes: tiny, fewer elements than ranks, uneven for 3 ranks, several pipeline segments, large.
const size_t kSizes[] = {1, 2, 7, 1000, 3 * 262144 + 5, 4u << 20};

volatile double g_sink;
// A compute loop that makes no MPI call.
double busy_ms(double ms) {
    double t0 = now_s(), x = 0;
    long i = 0;
    while ((now_s() - t0) * 1e3 < ms)
        for (int k = 0; k < 1000; k++) x += std::sqrt(double(i++));
    g_sink = x;
    return (now_s() - t0) * 1e3;
}

using CommEnv = CommTest;
using AllReduce = CommTest;
using ReduceScatter = CommTest;
using AllGather = CommTest;
using Broadcast = CommTest;
using SendRecv = CommTest;
using NonBlocking = CommTest;
using Bytes = CommTest;
using Determinism = CommTest;
using SelfGroup = CommTest;

TEST_F(CommEnv, WorldMatchesLauncher) {
    const char* ws = std::getenv("OMPI_COMM_WORLD_SIZE");
    EXPECT_EQ(env().is_distributed(), MpiEnv::launched_by_mpirun());
    EXPECT_EQ(env().world_size(), ws ? std::atoi(ws) : 1);
    EXPECT_EQ(world().size(), env().world_size());
    EXPECT_EQ(world().rank(), env().world_rank());
    EXPECT_EQ(world().is_self(), !env().is_distributed());
    int inited = 0;
    MPI_Initialized(&inited);
    EXPECT_EQ(inited != 0, env().is_distributed()) << "MPI_Init must happen only under mpirun";
    ASSERT_EQ(world().members().size(), size_t(nranks()));
    for (int r = 0; r < nranks(); r++) EXPECT_EQ(world().members()[size_t(r)], r);
}

TEST_F(CommEnv, MpiErrorBecomesShardlmError) {
    if (!env().is_distributed()) GTEST_SKIP() << "needs MPI";
    int r = 0;
    try {
        SHARDLM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_NULL, &r));
        ADD_FAILURE() << "no error";
    } catch (const shardlm::Error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("MPI_Comm_rank(MPI_COMM_NULL, &r)"), std::string::npos) << m;
        EXPECT_NE(m.find("test_collectives.cpp:"), std::string::npos) << m;
    }
}

TEST_F(AllReduce, FillWithRankSumsToTriangle) {
    const int n = nranks();
    for (size_t count : kSizes) {
        std::vector<float> v(count, float(rank()));
        world().all_reduce_sum(v.data(), count);
        const float want = float(n * (n - 1) / 2);
        size_t bad = 0;
        for (float x : v) bad += x != want;
        EXPECT_EQ(bad, 0u) << "count " << count;
    }
}

TEST_F(AllReduce, PositionDependentValuesAndMax) {
    const int n = nranks();
    for (size_t count : kSizes) {
        std::vector<float> v(count);
        for (size_t i = 0; i < count; i++) v[i] = float((rank() + 1) * int(i % 1000));
        world().all_reduce_sum(v.data(), count);
        size_t bad = 0;
        for (size_t i = 0; i < count; i++) bad += v[i] != float(n * (n + 1) / 2 * int(i % 1000));
        EXPECT_EQ(bad, 0u) << "count " << count;

        for (size_t i = 0; i < count; i++) v[i] = float((rank() + int(i)) % n);
        world().all_reduce_max(v.data(), count);
        bad = 0;
        for (float x : v) bad += x != float(n - 1);
        EXPECT_EQ(bad, 0u) << "max, count " << count;
    }
}

TEST_F(AllReduce, DoubleSumAndMax) {
    const int n = nranks();
    double v[3] = {double(rank()), 0.5, -double(rank())};
    world().all_reduce_sum(v, 3);
    EXPECT_EQ(v[0], n * (n - 1) / 2.0);
    EXPECT_EQ(v[1], 0.5 * n);
    EXPECT_EQ(v[2], -n * (n - 1) / 2.0);
    double m[2] = {double(rank()), -double(rank())};
    world().all_reduce_max(m, 2);
    EXPECT_EQ(m[0], n - 1.0);
    EXPECT_EQ(m[1], 0.0);
}

TEST_F(ReduceScatter, BlocksOfRankTimesIndex) {
    const int n = nranks();
    for (size_t m : {size_t(1), size_t(5), size_t(1000), size_t(300000)}) {
        // in[b][i] = (rank + 1) * (i + 1) + b   ->   out[i] on rank r = (i + 1) * n(n+1)/2 + n * r
        std::vector<float> in(size_t(n) * m), out(m, -1.0f);
        for (int b = 0; b < n; b++)
            for (size_t i = 0; i < m; i++) in[size_t(b) * m + i] = float((rank() + 1) * int((i % 4096) + 1) + b);
        world().reduce_scatter_sum(in.data(), out.data(), m);
        size_t bad = 0;
        for (size_t i = 0; i < m; i++) bad += out[i] != float(int((i % 4096) + 1) * n * (n + 1) / 2 + n * rank());
        EXPECT_EQ(bad, 0u) << "m " << m;
        // In place: out aliases in + rank * m.
        float* inplace = in.data() + size_t(rank()) * m;
        world().reduce_scatter_sum(in.data(), inplace, m);
        EXPECT_EQ(std::memcmp(inplace, out.data(), m * sizeof(float)), 0) << "in place, m " << m;
    }
}

TEST_F(AllGather, OutOfPlaceAndInPlace) {
    const int n = nranks();
    for (size_t m : {size_t(1), size_t(3), size_t(1000), size_t(300000)}) {
        std::vector<float> in(m), out(size_t(n) * m, -1.0f);
        for (size_t i = 0; i < m; i++) in[i] = float(rank() * 100000 + int(i % 50000));
        world().all_gather(in.data(), out.data(), m);
        size_t bad = 0;
        for (int b = 0; b < n; b++)
            for (size_t i = 0; i < m; i++) bad += out[size_t(b) * m + i] != float(b * 100000 + int(i % 50000));
        EXPECT_EQ(bad, 0u) << "m " << m;

        std::vector<float> buf(size_t(n) * m, -1.0f);
        std::memcpy(buf.data() + size_t(rank()) * m, in.data(), m * sizeof(float));
        world().all_gather(buf.data() + size_t(rank()) * m, buf.data(), m);
        EXPECT_EQ(buf, out) << "in place, m " << m;
    }
    // Byte path with an odd size.
    std::vector<unsigned char> b(7, (unsigned char)(rank() + 1)), all(7 * size_t(n));
    world().all_gather_bytes(b.data(), all.data(), 7);
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 7; i++) EXPECT_EQ(all[size_t(r) * 7 + size_t(i)], r + 1);
}

// All-to-all with counts (expert parallelism's exchange): rank r sends rank j a block of (r + 1)(j + 2) - 2 bytes
// (rank 0 to itself an empty one) valued by (sender, receiver, index), placed after a gap; every block lands
// where the receiver's offsets say, and the bytes sent are every block but the rank's own.
using AllToAll = CommTest;
TEST_F(AllToAll, BlocksOfEveryCountLandInPlace) {
    const int n = nranks(), r = rank();
    auto len = [](int from, int to) { return size_t((from + 1) * (to + 2) - 2); };
    auto value = [](int from, int to, size_t i) { return (unsigned char)(from * 31 + to * 7 + int(i % 13)); };
    const size_t ranks = size_t(n);
    std::vector<size_t> send(ranks), send_off(ranks), recv(ranks), recv_off(ranks);
    size_t s_at = 0, r_at = 3;
    for (int j = 0; j < n; j++) {
        send[size_t(j)] = len(r, j), send_off[size_t(j)] = s_at, s_at += send[size_t(j)];
        recv[size_t(j)] = len(j, r), recv_off[size_t(j)] = r_at, r_at += recv[size_t(j)] + 1;  // a byte's gap after each
    }
    std::vector<unsigned char> in(s_at), out(r_at, 0xEE);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < send[size_t(j)]; i++) in[send_off[size_t(j)] + i] = value(r, j, i);
    world().reset_stats();
    world().all_to_all_bytes(in.data(), send.data(), send_off.data(), out.data(), recv.data(), recv_off.data());
    size_t bad = 0, others = 0;
    for (int j = 0; j < n; j++) {
        for (size_t i = 0; i < recv[size_t(j)]; i++) bad += out[recv_off[size_t(j)] + i] != value(j, r, i);
        bad += out[recv_off[size_t(j)] + recv[size_t(j)]] != 0xEE;  // the gap untouched
        if (j != r) others += send[size_t(j)];
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(out[0], 0xEE);
    EXPECT_EQ(world().stats()[OpKind::AllToAll].bytes_sent, others);
    EXPECT_EQ(world().stats()[OpKind::AllToAll].calls, 1u);
}

TEST_F(Broadcast, FromEveryRoot) {
    const int n = nranks();
    for (int root = 0; root < n; root++) {
        for (size_t count : {size_t(1), size_t(1000), size_t(700000)}) {
            std::vector<float> v(count);
            for (size_t i = 0; i < count; i++) v[i] = rank() == root ? float(root * 7 + int(i % 999)) : -1.0f;
            world().broadcast(v.data(), count, root);
            size_t bad = 0;
            for (size_t i = 0; i < count; i++) bad += v[i] != float(root * 7 + int(i % 999));
            EXPECT_EQ(bad, 0u) << "root " << root << " count " << count;
        }
    }
    char s[6] = "-----";
    if (rank() == n - 1) std::memcpy(s, "hello", 6);
    world().broadcast_bytes(s, 6, n - 1);
    EXPECT_STREQ(s, "hello");
    float dummy = 0;
    EXPECT_THROW(world().broadcast(&dummy, 1, n), shardlm::Error);
}

TEST_F(SendRecv, Ring) {
    const int n = nranks();
    if (n == 1) GTEST_SKIP() << "needs 2 ranks";
    const int next = (rank() + 1) % n, prev = (rank() + n - 1) % n;
    for (size_t count : {size_t(1), size_t(100000), size_t(3000000)}) {
        std::vector<int> out(count, rank()), in(count, -1);
        // Blocking: even ranks send first, odd ranks receive first (no deadlock for any n).
        if (rank() % 2 == 0) {
            world().send(out.data(), count * sizeof(int), next, 7);
            world().recv(in.data(), count * sizeof(int), prev, 7);
        } else {
            world().recv(in.data(), count * sizeof(int), prev, 7);
            world().send(out.data(), count * sizeof(int), next, 7);
        }
        EXPECT_EQ(in, std::vector<int>(count, prev)) << "blocking, count " << count;
        // Non-blocking, isend first on every rank.
        std::fill(in.begin(), in.end(), -1);
        Request s = world().isend(out.data(), count * sizeof(int), next, 9);
        Request r = world().irecv(in.data(), count * sizeof(int), prev, 9);
        r.wait();
        s.wait();
        EXPECT_EQ(in, std::vector<int>(count, prev)) << "non-blocking, count " << count;
    }
    int x = 0;
    EXPECT_THROW(world().send(&x, 4, n, 0), shardlm::Error);
    EXPECT_THROW(world().recv(&x, 4, -1, 0), shardlm::Error);
    EXPECT_THROW(world().send(&x, 4, next, -3), shardlm::Error);
}

TEST_F(NonBlocking, AllReduceOverlapsABusyLoop) {
    const int n = nranks();
    const size_t count = 4u << 20;  // 16 MiB
    std::vector<float> v(count, float(rank()));
    Request rq = world().iall_reduce_sum(v.data(), count);
    // The main thread computes and never calls MPI; test() only reads a flag. The operation must
    // complete on the communication thread meanwhile.
    bool done = false;
    double t0 = now_s();
    while (!done && now_s() - t0 < 60) {
        busy_ms(2);
        done = rq.test();
    }
    EXPECT_TRUE(done) << "no progress without wait()";
    rq.wait();
    size_t bad = 0;
    for (float x : v) bad += x != float(n * (n - 1) / 2);
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(world().stats()[OpKind::AllReduce].bytes_sent >= ring_bytes(OpKind::AllReduce, count * 4, n), true);
}

TEST_F(NonBlocking, QueuedMixWaitedOutOfOrder) {
    const int n = nranks();
    const size_t m = 100003;
    std::vector<float> a(m * size_t(n)), rs(m), ag(m * size_t(n)), ar(m, float(rank() + 1)), bc(m);
    for (size_t i = 0; i < a.size(); i++) a[i] = float(rank() + 1);
    std::vector<float> mine(m, float(rank()));
    if (rank() == 0) std::fill(bc.begin(), bc.end(), 42.0f);
    Request r1 = world().ireduce_scatter_sum(a.data(), rs.data(), m);
    Request r2 = world().iall_gather(mine.data(), ag.data(), m);
    Request r3 = world().iall_reduce_sum(ar.data(), m);
    Request r4 = world().ibroadcast(bc.data(), m, 0);
    busy_ms(5);
    // A blocking call queues behind the pending ones.
    double d = 1;
    world().all_reduce_sum(&d, 1);
    EXPECT_EQ(d, double(n));
    r4.wait();
    r2.wait();
    r3.wait();
    r1.wait();
    EXPECT_TRUE(r1.test());  // a finished request stays complete
    const float tri = float(n * (n + 1) / 2);
    size_t bad = 0;
    for (size_t i = 0; i < m; i++) bad += rs[i] != tri || ar[i] != tri || bc[i] != 42.0f;
    for (int b = 0; b < n; b++)
        for (size_t i = 0; i < m; i++) bad += ag[size_t(b) * m + i] != float(b);
    EXPECT_EQ(bad, 0u);
}

TEST_F(NonBlocking, EveryWaitMode) {
    const int n = nranks();
    for (WaitMode mode : {WaitMode::Spin, WaitMode::Yield, WaitMode::Sleep}) {
        set_background_wait(mode);
        std::vector<float> v(300001, 1.0f);
        Request rq = world().iall_reduce_sum(v.data(), v.size());
        busy_ms(1);
        rq.wait();
        size_t bad = 0;
        for (float x : v) bad += x != float(n);
        EXPECT_EQ(bad, 0u) << int(mode);
    }
    set_background_wait(WaitMode::Sleep);
}

// Bytes sent per operation equal the ring formulas exactly, per rank and summed over ranks.
TEST_F(Bytes, MatchRingFormulas) {
    const int n = nranks();
    auto total_over_ranks = [&](uint64_t b) {
        double d = double(b);
        world().all_reduce_sum(&d, 1);
        return uint64_t(d);
    };
    // All-reduce: even (multiple of n) and uneven sizes.
    for (size_t count : {size_t(12 * 1024), size_t(12 * 1024 + 1), size_t(1000003), size_t(2)}) {
        std::vector<float> v(count, 1.0f);
        world().reset_stats();
        world().all_reduce_sum(v.data(), count);
        const uint64_t got = world().stats()[OpKind::AllReduce].bytes_sent;
        EXPECT_EQ(world().stats()[OpKind::AllReduce].calls, 1u);
        EXPECT_EQ(got, ring_bytes_rank(OpKind::AllReduce, count, 4, n, rank())) << "count " << count;
        if (count % size_t(n) == 0) {
            EXPECT_EQ(got, ring_bytes(OpKind::AllReduce, count * 4, n)) << count;
        }
        EXPECT_EQ(total_over_ranks(got), 2 * uint64_t(n - 1) * count * 4) << "count " << count;
        // The non-blocking form counts the same.
        world().reset_stats();
        world().iall_reduce_sum(v.data(), count).wait();
        EXPECT_EQ(world().stats()[OpKind::AllReduce].bytes_sent, got);
    }
    for (size_t m : {size_t(1), size_t(4097)}) {
        const size_t total = size_t(n) * m * 4;
        std::vector<float> in(size_t(n) * m, 1.0f), out(m), all(size_t(n) * m);
        world().reset_stats();
        world().reduce_scatter_sum(in.data(), out.data(), m);
        world().all_gather(out.data(), all.data(), m);
        world().ireduce_scatter_sum(in.data(), out.data(), m).wait();
        world().iall_gather(out.data(), all.data(), m).wait();
        const auto& st = world().stats();
        EXPECT_EQ(st[OpKind::ReduceScatter].calls, 2u);
        EXPECT_EQ(st[OpKind::AllGather].calls, 2u);
        EXPECT_EQ(st[OpKind::ReduceScatter].bytes_sent, 2 * ring_bytes(OpKind::ReduceScatter, total, n));
        EXPECT_EQ(st[OpKind::AllGather].bytes_sent, 2 * ring_bytes(OpKind::AllGather, total, n));
        EXPECT_EQ(st[OpKind::AllGather].bytes_sent,
                  2 * ring_bytes_rank(OpKind::AllGather, size_t(n) * m, 4, n, rank()));
        EXPECT_EQ(ring_bytes(OpKind::AllGather, total, n), uint64_t(n - 1) * m * 4);
    }
    // Broadcast: every rank of the chain but the last sends the whole buffer.
    for (int root = 0; root < n; root++) {
        std::vector<float> v(300007, 1.0f);
        world().reset_stats();
        world().broadcast(v.data(), v.size(), root);
        const uint64_t got = world().stats()[OpKind::Broadcast].bytes_sent;
        EXPECT_EQ(got, ring_bytes_rank(OpKind::Broadcast, v.size(), 4, n, rank(), root));
        EXPECT_EQ(total_over_ranks(got), uint64_t(n - 1) * v.size() * 4);
    }
    // Send/recv: the sender counts the payload, the receiver nothing; barrier sends nothing.
    if (n >= 2) {
        std::vector<char> buf(12345);
        world().reset_stats();
        if (rank() == 0) world().send(buf.data(), buf.size(), 1, 3);
        if (rank() == 1) world().recv(buf.data(), buf.size(), 0, 3);
        world().barrier();
        EXPECT_EQ(world().stats()[OpKind::SendRecv].bytes_sent, rank() == 0 ? 12345u : 0u);
        EXPECT_EQ(world().stats()[OpKind::SendRecv].calls, rank() <= 1 ? 1u : 0u);
        EXPECT_EQ(world().stats()[OpKind::Barrier].calls, 1u);
        EXPECT_EQ(world().stats()[OpKind::Barrier].bytes_sent, 0u);
    }
    const std::string table = world().stats_table();
    EXPECT_NE(table.find("total"), std::string::npos) << table;
}

TEST_F(Bytes, TheoryTable) {
    EXPECT_EQ(ring_bytes(OpKind::AllReduce, 1 << 20, 2), size_t(1) << 20);
    EXPECT_EQ(ring_bytes(OpKind::AllReduce, 1 << 20, 4), size_t(3) << 19);
    EXPECT_EQ(ring_bytes(OpKind::ReduceScatter, 1 << 20, 4), size_t(3) << 18);
    EXPECT_EQ(ring_bytes(OpKind::AllGather, 1 << 20, 1), 0u);
    EXPECT_EQ(ring_bytes(OpKind::SendRecv, 100, 3), 100u);
    EXPECT_EQ(ring_bytes(OpKind::Barrier, 100, 3), 0u);
    // 3 ranks, 10 floats: blocks 4, 3, 3 -> rank r sends 40 - |b_r| + 40 - |b_{r+1}| (x4 bytes).
    EXPECT_EQ(ring_bytes_rank(OpKind::AllReduce, 10, 4, 3, 0), size_t(4 * (10 - 4 + 10 - 3)));
    EXPECT_EQ(ring_bytes_rank(OpKind::AllReduce, 10, 4, 3, 1), size_t(4 * (10 - 3 + 10 - 3)));
    EXPECT_EQ(ring_bytes_rank(OpKind::AllReduce, 10, 4, 3, 2), size_t(4 * (10 - 3 + 10 - 4)));
    EXPECT_EQ(ring_bytes_rank(OpKind::Broadcast, 10, 4, 3, 1, 2), 0u);  // chain 2 -> 0 -> 1
    EXPECT_EQ(ring_bytes_rank(OpKind::Broadcast, 10, 4, 3, 0, 2), 40u);
}

TEST_F(Determinism, BitIdenticalAndInRingOrder) {
    const int n = nranks();
    const size_t count = 1000003;
    auto make = [&](int r) {
        std::mt19937 g(1234u + unsigned(r));
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> v(count);
        for (auto& x : v) x = u(g) * std::exp2(float(int(g() % 20)) - 10.0f);
        return v;
    };
    const std::vector<float> input = make(rank());
    std::vector<float> a = input, b = input;
    world().all_reduce_sum(a.data(), count);
    world().iall_reduce_sum(b.data(), count).wait();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), count * 4), 0) << "two identical all-reduces differ";
    // Same bits on every rank.
    std::vector<float> r0 = a;
    world().broadcast(r0.data(), count, 0);
    EXPECT_EQ(std::memcmp(a.data(), r0.data(), count * 4), 0) << "ranks disagree";
    // And exactly the documented order: block b = ((x[b+1] + x[b+2]) + ...) + x[b].
    std::vector<std::vector<float>> all;
    for (int r = 0; r < n; r++) all.push_back(make(r));
    const size_t base = count / size_t(n), rem = count % size_t(n);
    size_t bad = 0;
    for (int blk = 0; blk < n; blk++) {
        const size_t off = base * size_t(blk) + std::min(size_t(blk), rem), len = base + (size_t(blk) < rem);
        for (size_t i = off; i < off + len; i++) {
            float acc = all[size_t((blk + 1) % n)][i];
            for (int k = 2; k <= n; k++) acc = acc + all[size_t((blk + k) % n)][i];
            bad += std::memcmp(&acc, &a[i], 4) != 0;
        }
    }
    EXPECT_EQ(bad, 0u);
}

TEST_F(Determinism, SegmentSizeDoesNotChangeResults) {
    // Tiny segments: many segments per block and the receive slots reused many times over.
    const int n = nranks();
    const size_t count = 200003, m = 50001;
    std::mt19937 g(99u + unsigned(rank()));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(count), in(size_t(n) * m);
    for (auto& v : x) v = u(g);
    for (auto& v : in) v = u(g);
    std::vector<float> a = x, rs_a(m), bc_a = x;
    world().all_reduce_sum(a.data(), count);
    world().reduce_scatter_sum(in.data(), rs_a.data(), m);
    world().broadcast(bc_a.data(), count, n - 1);
    const size_t saved = segment_bytes();
    set_segment_bytes(4096);
    std::vector<float> b = x, rs_b(m), bc_b = x;
    world().all_reduce_sum(b.data(), count);
    Request rq = world().ireduce_scatter_sum(in.data(), rs_b.data(), m);
    rq.wait();
    world().broadcast(bc_b.data(), count, n - 1);
    set_segment_bytes(saved);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), count * 4), 0);
    EXPECT_EQ(std::memcmp(rs_a.data(), rs_b.data(), m * 4), 0);
    EXPECT_EQ(std::memcmp(bc_a.data(), bc_b.data(), count * 4), 0);
}

TEST_F(SelfGroup, IdentityAndZeroBytes) {
    Group g = Group::self();
    EXPECT_EQ(g.size(), 1);
    EXPECT_EQ(g.rank(), 0);
    EXPECT_TRUE(g.is_self());
    EXPECT_EQ(g.members(), std::vector<int>{env().world_rank()});
    std::vector<float> v = {1.5f, -2.0f, 3.25f}, out(3, 0.0f);
    g.all_reduce_sum(v.data(), 3);
    EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f, 3.25f}));
    g.reduce_scatter_sum(v.data(), out.data(), 3);
    EXPECT_EQ(out, v);
    std::fill(out.begin(), out.end(), 0.0f);
    g.all_gather(v.data(), out.data(), 3);
    EXPECT_EQ(out, v);
    g.all_gather(out.data(), out.data(), 3);  // in place
    EXPECT_EQ(out, v);
    g.broadcast(v.data(), 3, 0);
    g.iall_reduce_sum(v.data(), 3).wait();
    g.ireduce_scatter_sum(v.data(), out.data(), 3).wait();
    g.iall_gather(v.data(), out.data(), 3).wait();
    EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f, 3.25f}));
    g.barrier();
    int x = 5, y = 0;
    g.send(&x, 4, 0, 1);
    g.recv(&y, 4, 0, 1);
    EXPECT_EQ(y, 5);
    EXPECT_THROW(g.recv(&y, 4, 0, 1), shardlm::Error);  // nothing sent: would wait forever
    EXPECT_THROW(g.broadcast(v.data(), 3, 1), shardlm::Error);
    const CommStats& st = g.stats();
    for (OpKind k : {OpKind::AllReduce, OpKind::ReduceScatter, OpKind::AllGather, OpKind::Broadcast, OpKind::Barrier})
        EXPECT_EQ(st[k].bytes_sent, 0u) << op_name(k);
    EXPECT_EQ(st[OpKind::AllReduce].calls, 2u);
    EXPECT_EQ(st[OpKind::AllGather].calls, 3u);
    g.reset_stats();
    EXPECT_EQ(g.stats().total_bytes_sent(), 0u);
    EXPECT_EQ(g.stats()[OpKind::AllReduce].calls, 0u);
}

TEST_F(SelfGroup, SizeOneMpiGroupIsIdentityToo) {
    // Each rank alone in its own split group (a real MPI communicator of size 1).
    Group g = world().split(rank(), 0);
    EXPECT_EQ(g.size(), 1);
    EXPECT_EQ(g.members(), std::vector<int>{rank()});
    std::vector<float> v(1000, float(rank())), out(1000);
    g.all_reduce_sum(v.data(), v.size());
    g.iall_reduce_sum(v.data(), v.size()).wait();
    g.all_gather(v.data(), out.data(), v.size());
    g.reduce_scatter_sum(out.data(), out.data(), out.size());
    EXPECT_EQ(out, v);
    EXPECT_EQ(v, std::vector<float>(1000, float(rank())));
    EXPECT_EQ(g.stats().total_bytes_sent(), 0u);
}

}  // namespace
}  // namespace shardlm::comm::test
