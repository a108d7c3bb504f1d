// No busy-waiting (issue 21, item 7): a rank waiting for a peer that has stopped (kill -STOP) must
// leave the CPU alone. Before, it polled MPI without sleeping and took a whole core (500 of 500 ticks
// in 5 s), which on a machine with more ranks than cores is the core its peer needed.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"

namespace {

namespace fs = std::filesystem;
using shardlm::test::kBin;
using shardlm::test::kFix;

// utime + stime of a process (all its threads), in seconds
double cpu_seconds(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::istringstream rest(s.substr(s.rfind(')') + 2));
    std::string f;
    std::vector<std::string> v;
    while (rest >> f) v.push_back(f);
    if (v.size() < 13) return -1;
    return (std::stod(v[11]) + std::stod(v[12])) / double(::sysconf(_SC_CLK_TCK));
}

// the world rank of a shardlm process started by mpirun (-1 if unknown)
int world_rank_of(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string key = std::string("OMPI_COMM_WORLD_RANK=");
    const size_t at = env.find(key);
    return at == std::string::npos ? -1 : std::atoi(env.c_str() + at + key.size());
}

class Waiting : public shardlm::test::CliTest {};

TEST_F(Waiting, ARankWaitingForAStoppedPeerSleeps) {
    const fs::path out = tmp / "run";
    const std::string cmd = shardlm::test::mpirun(2) + kBin + " train --model tiny --n-layer 2 --n-head 4 --n-embd 48 " +
                            "--vocab-size 211 --data " + kFix + "/data.bin --seq 16 --global-batch 4 --micro-batch 1 " +
                            "--threads 1 --steps 100000000 --dp 2 --out " + out.string();
    std::system(("(timeout -s KILL 60 " + cmd + " > " + (tmp / "log.txt").string() + " 2>&1 &)").c_str());
    // the two ranks, once training runs
    int pids[2] = {-1, -1};
    for (int i = 0; i < 200 && (pids[0] < 0 || pids[1] < 0 || !fs::exists(out / "metrics.jsonl")); i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        // the shardlm processes training into `out` (read from /proc: a bare system has no pgrep)
        std::error_code ec;
        for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
            const fs::directory_entry& e = *it;
            const std::string name = e.path().filename().string();
            if (name.find_first_not_of("0123456789") != std::string::npos) continue;
            std::ifstream in(e.path() / "cmdline", std::ios::binary);
            std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            if (cmdline.rfind(kBin + std::string(1, '\0') + "train", 0) != 0 || cmdline.find(out.string()) == std::string::npos)
                continue;
            const int pid = std::stoi(name), r = world_rank_of(pid);
            if (r == 0 || r == 1) pids[r] = pid;
        }
    }
    ASSERT_GT(pids[0], 0);
    ASSERT_GT(pids[1], 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(pids[1], SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 is now waiting for it
    const double c0 = cpu_seconds(pids[0]);
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const double used = cpu_seconds(pids[0]) - c0;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::kill(pids[1], SIGKILL);
    ::kill(pids[0], SIGKILL);
    ::kill(pids[1], SIGCONT);
    // spinning takes ~1 CPU second per second; sleeping with back-off a few per cent
    EXPECT_LT(used / wall, 0.25) << "rank 0 used " << used << " CPU s in " << wall << " s waiting for a stopped peer";
}

}  // namespace
