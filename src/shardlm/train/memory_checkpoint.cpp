#include "shardlm/train/memory_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "shardlm/core/check.h"
#include "shardlm/core/format.h"
#include "shardlm/io/atomic_file.h"
#include "shardlm/io/hash.h"
#include "shardlm/io/json_file.h"
#include "shardlm/train/rank_text.h"

namespace shardlm::train {

namespace fs = std::filesystem;

namespace {

constexpr int kTagSize = 7101, kTagBlob = 7102, kTagFile = 7103;

// The step of a "ckpt_<8 digits>" name, or -1.
int ckpt_step(const std::string& name) {
    return checkpoint_dir_kind(name) == CheckpointDir::Complete ? std::atoi(name.c_str() + 5) : -1;
}

std::string host_key(int world_rank) {
    if (const char* h = std::getenv("SHARDLM_MEM_CKPT_HOSTS"); h && std::string(h) == "per-rank")
        return "rank" + std::to_string(world_rank);
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    return host;
}

void send_text(comm::Group& g, const std::string& s, int dst, int tag) {
    const uint64_t n = s.size();
    g.send(&n, sizeof n, dst, kTagSize);
    g.send(s.data(), n, dst, tag);
}

std::string recv_text(comm::Group& g, int src, int tag) {
    uint64_t n = 0;
    g.recv(&n, sizeof n, src, kTagSize);
    std::string s(n, '\0');
    g.recv(s.data(), n, src, tag);
    return s;
}

std::string bcast_text(comm::Group& g, std::string s, int root) {
    uint64_t n = s.size();
    g.broadcast_bytes(&n, sizeof n, root);
    s.resize(n);
    g.broadcast_bytes(s.data(), n, root);
    return s;
}

// <mem-ckpt-dir>/shardlm-<hash of the run directory's absolute path>: every run's stores of that directory.
std::string runs_dir(const TrainConfig& cfg) {
    const std::string out = fs::weakly_canonical(fs::absolute(cfg.output.out)).string();
    return (fs::path(cfg.output.mem_ckpt_dir) / ("shardlm-" + io::hex64(io::xxh64(out)))).string();
}

std::string run_id_file(const TrainConfig& cfg) { return (fs::path(cfg.output.out) / "memory_checkpoints.json").string(); }

// The run's id in RUN_DIR/memory_checkpoints.json ("" if none or unreadable).
std::string read_run_id(const TrainConfig& cfg) {
    std::error_code ec;
    if (!fs::exists(run_id_file(cfg), ec)) return "";
    const nlohmann::json j = nlohmann::json::parse(io::read_file(run_id_file(cfg)), nullptr, false);
    return j.is_object() && j.contains("run") && j["run"].is_string() ? j["run"].get<std::string>() : "";
}

// Rank 0's answer for every rank: a resumed run keeps its id; a fresh start (or a run without one) that keeps
// checkpoints in memory gets a new one, written first.
std::string agree_run_id(const TrainConfig& cfg, comm::Group& world) {
    std::string id;
    if (world.rank() == 0) {
        if (cfg.output.resume) id = read_run_id(cfg);
        if (id.empty() && cfg.output.mem_ckpt_every > 0) {
            std::random_device rd;
            const uint64_t seed = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
            id = io::hex64(io::xxh64(&seed, sizeof seed, uint64_t(::getpid())));
            fs::create_directories(cfg.output.out);
            io::write_file_atomic(run_id_file(cfg), nlohmann::json{{"run", id}, {"dir", runs_dir(cfg)}}.dump(1) + "\n");
        }
    }
    return bcast_text(world, id, 0);
}

}  // namespace

std::string memory_checkpoint_root(const TrainConfig& cfg) {
    const std::string id = read_run_id(cfg);
    return id.empty() ? "" : (fs::path(runs_dir(cfg)) / id).string();
}

int newest_memory_checkpoint_step(const TrainConfig& cfg) {
    int newest = -1;
    const std::string root = memory_checkpoint_root(cfg);
    std::error_code ec;
    if (root.empty()) return newest;
    for (const auto& host : fs::directory_iterator(root, ec))
        for (const auto& store : fs::directory_iterator(host.path(), ec))
            for (const auto& c : fs::directory_iterator(store.path(), ec))
                if (fs::exists(c.path() / "meta.json", ec)) newest = std::max(newest, ckpt_step(c.path().filename().string()));
    return newest;
}

std::vector<int> choose_partners(const std::vector<int>& next, const std::vector<std::string>& hosts) {
    const size_t n = next.size();
    if (n == 1) return {-1};
    bool one_host = true, across = true;
    for (size_t r = 0; r < n; r++) {
        one_host &= hosts[r] == hosts[0];
        across &= hosts[size_t(next[r])] != hosts[r];
    }
    if (one_host || across) return next;
    // the ranks grouped by host (in the order the hosts first appear), each sending as far along as the
    // largest host has ranks
    std::vector<std::string> order;
    std::map<std::string, std::vector<int>> members;
    for (size_t r = 0; r < n; r++) {
        if (!members.count(hosts[r])) order.push_back(hosts[r]);
        members[hosts[r]].push_back(int(r));
    }
    std::vector<int> list;
    size_t shift = 0;
    for (const std::string& h : order) {
        list.insert(list.end(), members[h].begin(), members[h].end());
        shift = std::max(shift, members[h].size());
    }
    std::vector<int> partner(n);
    for (size_t i = 0; i < n; i++) partner[size_t(list[i])] = list[(i + shift) % n];
    return partner;
}

MemoryCheckpoints::MemoryCheckpoints(const TrainConfig& cfg, comm::Group& world, const std::vector<int>& next)
    : world_(world), runs_(runs_dir(cfg)), host_(host_key(world.rank())), hosts_(all_gather_text(world, host_)) {
    const std::string id = agree_run_id(cfg, world);
    root_ = id.empty() ? "" : (fs::path(runs_) / id).string();
    const std::vector<int> partners = choose_partners(next, hosts_);
    partner_ = partners[size_t(world.rank())];
    for (size_t r = 0; r < partners.size(); r++)
        if (partners[r] == world.rank()) from_ = int(r);
    const bool one_host = std::all_of(hosts_.begin(), hosts_.end(), [&](const std::string& h) { return h == hosts_[0]; });
    std::string same;
    for (size_t r = 0; r < partners.size() && !one_host; r++)
        if (partners[r] >= 0 && hosts_[r] == hosts_[size_t(partners[r])]) same += " " + std::to_string(r);
    if (world.rank() == 0 && !same.empty() && cfg.output.mem_ckpt_every > 0)
        std::printf("warning: --mem-ckpt-every: world ranks%s keep their copy on their own host (hosts of unequal sizes): "
                    "after the loss of one of those hosts a restart reads the disk\n", same.c_str());
}

std::string MemoryCheckpoints::host_dir() const { return root_.empty() ? "" : (fs::path(root_) / host_).string(); }

std::string MemoryCheckpoints::store() const { return (fs::path(host_dir()) / ("rank" + std::to_string(world_.rank()))).string(); }

bool MemoryCheckpoints::host_leader() const {
    return std::find(hosts_.begin(), hosts_.end(), host_) - hosts_.begin() == world_.rank();
}

std::string MemoryCheckpoints::first_problem(const std::string& mine) {
    for (const std::string& p : all_gather_text(world_, mine))
        if (!p.empty()) return p;
    return "";
}

void MemoryCheckpoints::save(PendingCheckpoint& p) {
    if (!enabled_ || root_.empty()) return;
    const fs::path dir = store(), tmp = dir / ("." + checkpoint_name(p.step()) + ".tmp"), final_dir = dir / checkpoint_name(p.step());
    const std::vector<std::pair<std::string, std::string>> mine = p.take_files();
    std::string problem = write_own(mine, tmp.string());
    const std::string received = partner_ >= 0 ? exchange_with_partner(mine, problem.empty() ? tmp.string() : "") : "";
    if (problem.empty()) problem = received;
    // meta.json and config.json in every store
    const std::vector<std::string> sums = all_gather_text(world_, p.sums());
    const std::string meta = bcast_text(world_, world_.rank() == 0 ? p.meta_json(sums) : "", 0);
    const std::string config = bcast_text(world_, world_.rank() == 0 ? p.hf_config() : "", 0);
    try {
        if (problem.empty()) io::write_file_atomic((tmp / "config.json").string(), config);
        if (problem.empty()) io::write_file_atomic((tmp / "meta.json").string(), meta);
    } catch (const std::exception& e) {
        problem = e.what();
    }
    problem = first_problem(problem);
    std::string renamed;
    if (problem.empty()) try {
            fs::remove_all(final_dir);
            fs::rename(tmp, final_dir);
        } catch (const std::exception& e) {
            renamed = e.what();
        }
    // (the agreement is the barrier:) once every store holds this step, the older one goes; until then it is
    // whole in every store (a kill during a save loses at most this step), after it this one is
    if (problem.empty()) problem = first_problem(renamed);
    std::error_code ec;
    if (!problem.empty()) {
        fs::remove_all(tmp, ec);
        enabled_ = false;
        if (world_.rank() == 0)
            std::printf("warning: the checkpoint of step %d could not be kept in memory (%s): no more are; a restart reads the "
                        "disk\n---> HINT: free the memory of --mem-ckpt-dir (df -h %s), or --mem-ckpt-every 0\n",
                        p.step(), problem.c_str(), fs::path(runs_).parent_path().c_str());
        return;
    }
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path() != final_dir) fs::remove_all(e.path(), ec);
    if (!pruned_) prune_host();
}

std::string MemoryCheckpoints::write_own(const std::vector<std::pair<std::string, std::string>>& mine, const std::string& tmp) {
    try {
        fs::remove_all(tmp);
        fs::create_directories(tmp);
        for (const auto& [name, bytes] : mine) io::write_file_atomic((fs::path(tmp) / name).string(), bytes);
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

// This rank's files to its partner (a list "<name> <bytes>\n", then each file), its source's into dir (not
// kept when dir is "": this rank's own write failed). The sends never wait for the receive.
std::string MemoryCheckpoints::exchange_with_partner(const std::vector<std::pair<std::string, std::string>>& mine,
                                                     const std::string& dir) {
    std::string list;
    for (const auto& [name, bytes] : mine) list += name + " " + std::to_string(bytes.size()) + "\n";
    const uint64_t n = list.size();
    std::vector<comm::Request> sends;
    sends.push_back(world_.isend(&n, sizeof n, partner_, kTagSize));
    sends.push_back(world_.isend(list.data(), n, partner_, kTagBlob));
    for (const auto& [name, bytes] : mine) sends.push_back(world_.isend(bytes.data(), bytes.size(), partner_, kTagFile));
    std::istringstream theirs(recv_text(world_, from_, kTagBlob));
    std::string name, problem;
    size_t bytes = 0;
    while (theirs >> name >> bytes) {
        std::string b(bytes, '\0');
        world_.recv(b.data(), bytes, from_, kTagFile);
        try {
            if (!dir.empty() && problem.empty()) io::write_file_atomic((fs::path(dir) / name).string(), b);
        } catch (const std::exception& e) {
            problem = e.what();
        }
    }
    for (comm::Request& r : sends) r.wait();
    return problem;
}

// After the first save of this job, what earlier jobs left on the host beside its ranks' stores: the stores of
// ranks of another layout (their steps are older than this one) and assembled copies of a killed restart.
void MemoryCheckpoints::prune_host() {
    pruned_ = true;
    if (!host_leader()) return;
    std::set<std::string> mine;
    for (size_t k = 0; k < hosts_.size(); k++)
        if (hosts_[k] == host_) mine.insert("rank" + std::to_string(k));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(host_dir(), ec))
        if (!mine.count(e.path().filename().string())) fs::remove_all(e.path(), ec);
}

namespace {

// One copy of a checkpoint: its step and its meta.json's xxh64 (a step written twice, by two attempts or two
// layouts, is two snapshots; files count only with the meta.json beside them).
using Snapshot = std::pair<int, std::string>;

// One line per file the host's stores hold ("H <step> <meta> <file> <path>") and per file a snapshot needs
// ("N <step> <meta> <file>"), from the host's leader.
std::string holdings_report(const fs::path& host_dir) {
    std::string out;
    std::error_code ec;
    for (const auto& store : fs::directory_iterator(host_dir, ec))
        for (const auto& c : fs::directory_iterator(store.path(), ec)) {
            const int step = ckpt_step(c.path().filename().string());
            const fs::path meta = c.path() / "meta.json";
            if (step < 0 || !fs::exists(meta, ec)) continue;
            try {
                const std::string text = io::read_file(meta.string());
                const std::string id = io::hex64(io::xxh64(text));
                for (const auto& [name, sum] : checkpoint_files(nlohmann::json::parse(text), meta.string()))
                    out += format("N %d %s %s\n", step, id.c_str(), name.c_str());
                out += format("N %d %s meta.json\n", step, id.c_str());
                for (const auto& f : fs::directory_iterator(c.path(), ec))
                    out += format("H %d %s %s %s\n", step, id.c_str(), f.path().filename().string().c_str(), f.path().string().c_str());
            } catch (const std::exception&) {  // an unreadable meta.json: that copy is not counted
            }
        }
    return out;
}

}  // namespace

// What every host's stores hold, from the leaders' reports.
struct Census {  // (train/memory_checkpoint.h)
    std::map<std::string, std::map<Snapshot, std::map<std::string, std::string>>> have;  // host -> snapshot -> file -> path
    std::map<Snapshot, std::set<std::string>> need;
    bool holds(const std::string& host, const Snapshot& s, const std::string& f) const {
        const auto h = have.find(host);
        if (h == have.end()) return false;
        const auto c = h->second.find(s);
        return c != h->second.end() && c->second.count(f);
    }
};

namespace {

Census take_census(const std::vector<std::string>& reports, const std::vector<std::string>& hosts) {
    Census c;
    for (size_t rank = 0; rank < reports.size(); rank++) {
        std::istringstream lines(reports[rank]);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream in(line);
            std::string kind, id, file, path;
            int step = 0;
            if (!(in >> kind >> step >> id >> file)) continue;
            if (kind == "N") c.need[{step, id}].insert(file);
            if (kind == "H" && std::getline(in >> std::ws, path)) c.have[hosts[rank]][{step, id}].emplace(file, path);  // (a path may hold spaces)
        }
    }
    return c;
}

// The newest snapshot at step >= at_least whose every file some host holds.
std::optional<Snapshot> newest_whole(const Census& c, int at_least) {
    for (auto it = c.need.rbegin(); it != c.need.rend() && it->first.first >= at_least; ++it) {
        const bool whole = std::all_of(it->second.begin(), it->second.end(), [&](const std::string& f) {
            return std::any_of(c.have.begin(), c.have.end(), [&](const auto& h) { return c.holds(h.first, it->first, f); });
        });
        if (whole) return it->first;
    }
    return std::nullopt;
}

}  // namespace

MemoryRecovery MemoryCheckpoints::recover(int at_least) {
    if (root_.empty()) return MemoryRecovery{};
    const Census c = take_census(all_gather_text(world_, host_leader() ? holdings_report(host_dir()) : ""), hosts_);
    const std::optional<Snapshot> snap = newest_whole(c, at_least);
    if (!snap) return MemoryRecovery{};
    MemoryRecovery r;
    r.step = snap->first;
    r.dir = (fs::path(host_dir()) / (".recover_" + checkpoint_name(r.step))).string();
    std::string problem = first_problem(assemble(c, *snap, r));  // (also the barrier before the checks)
    if (problem.empty()) problem = first_problem(check_assembled(r.dir));
    if (!problem.empty()) {
        if (world_.rank() == 0)
            std::printf("warning: the checkpoint of step %d kept in memory cannot be read (%s): reading the disk\n", r.step, problem.c_str());
        release(r);
        return MemoryRecovery{};
    }
    double mb[2] = {r.local_mb, r.mpi_mb};
    world_.all_reduce_sum(mb, 2);
    r.local_mb = mb[0], r.mpi_mb = mb[1];
    return r;
}

// This host's copy of the snapshot in r.dir: hard links into its own stores; a file it lacks from the lowest
// rank of a host that holds it, to the host's leader (every transfer happens, whatever failed, one at a time
// in the same order on every rank). Returns what went wrong on this rank ("" if nothing).
std::string MemoryCheckpoints::assemble(const Census& c, const Snapshot& snap, MemoryRecovery& r) {
    const fs::path view = r.dir;
    std::string problem;
    auto attempt = [&](const auto& f) {
        if (!problem.empty()) return;
        try {
            f();
        } catch (const std::exception& e) {
            problem = e.what();
        }
    };
    if (host_leader()) attempt([&] {
        fs::remove_all(view);
        fs::create_directories(view);
    });
    std::vector<std::string> hosts_in_order;
    for (const std::string& h : hosts_)
        if (std::find(hosts_in_order.begin(), hosts_in_order.end(), h) == hosts_in_order.end()) hosts_in_order.push_back(h);
    for (const std::string& h : hosts_in_order) {
        const int leader = int(std::find(hosts_.begin(), hosts_.end(), h) - hosts_.begin());
        for (const std::string& f : c.need.at(snap)) {
            if (c.holds(h, snap, f)) {
                if (world_.rank() == leader) attempt([&] {
                    const std::string& from = c.have.at(h).at(snap).at(f);
                    std::error_code ec;
                    fs::create_hard_link(from, view / f, ec);
                    if (ec) fs::copy_file(from, view / f, fs::copy_options::overwrite_existing);
                    r.local_mb += double(fs::file_size(view / f)) / 1e6;
                });
                continue;
            }
            int provider = 0;
            while (!c.holds(hosts_[size_t(provider)], snap, f)) provider++;
            if (world_.rank() == provider) {
                std::string bytes;
                attempt([&] { bytes = io::read_file(c.have.at(hosts_[size_t(provider)]).at(snap).at(f)); });
                send_text(world_, bytes, leader, kTagFile);
            }
            if (world_.rank() == leader) {
                const std::string bytes = recv_text(world_, provider, kTagFile);
                attempt([&] { io::write_file_atomic((view / f).string(), bytes); });
                r.mpi_mb += double(bytes.size()) / 1e6;
            }
        }
    }
    return problem;
}

// "" or what is wrong with the assembled copy in dir: every checksum, the host's files split between its ranks.
std::string MemoryCheckpoints::check_assembled(const std::string& dir) const {
    std::vector<int> mates;
    for (size_t k = 0; k < hosts_.size(); k++)
        if (hosts_[k] == host_) mates.push_back(int(k));
    const size_t me = size_t(std::find(mates.begin(), mates.end(), world_.rank()) - mates.begin());
    try {
        const std::string meta_path = (fs::path(dir) / "meta.json").string();
        const auto listed = checkpoint_files(io::read_json_file(meta_path), meta_path);
        for (size_t i = me; i < listed.size(); i += mates.size()) {
            const fs::path f = fs::path(dir) / listed[i].first;
            if (!listed[i].second.empty() && io::hex64(io::xxh64_file(f.string())) != listed[i].second)
                return f.string() + ": checksum mismatch";
        }
    } catch (const std::exception& e) {
        return e.what();
    }
    return "";
}

void MemoryCheckpoints::release(MemoryRecovery& r) {
    world_.barrier();
    std::error_code ec;
    if (host_leader() && !r.dir.empty()) fs::remove_all(r.dir, ec);
    r.dir.clear();
}

void MemoryCheckpoints::clear(bool earlier_runs) {
    world_.barrier();
    std::error_code ec;
    if (host_leader()) {
        if (!root_.empty()) fs::remove_all(fs::path(root_) / host_, ec);
        if (earlier_runs)
            for (const auto& run : fs::directory_iterator(runs_, ec))
                if (run.path().string() != root_) fs::remove_all(run.path() / host_, ec);
        // a run's directory, and the directory's, once empty (another machine's hosts may share a file system)
        for (const auto& run : fs::directory_iterator(runs_, ec)) fs::remove(run.path(), ec);
        fs::remove(runs_, ec);
    }
    world_.barrier();
}

}  // namespace shardlm::train
