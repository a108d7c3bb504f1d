// comm/flight_analysis.cpp: reading the flight recorder's dumps of every rank and saying where they
// disagree (`shardlm report --flight DIR`, and `shardlm launch` after a failed attempt).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "shardlm/comm/flight.h"
#include "shardlm/core/check.h"
#include "shardlm/io/json_file.h"

namespace shardlm::comm::flight {

namespace {

using nlohmann::json;

struct Rec {
    int rank = 0;  // world rank of the dump
    uint64_t seq = 0, bytes = 0;
    std::string op, state, dir;
    int peer = -1, tag = -1;
    double waited = 0;  // seconds from its start (or issue) to the dump, when not done
};

std::string fmt_s(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f s", s);
    return b;
}

std::string join(const std::vector<int>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); i++) {
        if (i) s += ',';
        s += std::to_string(v[i]);
    }
    return s;
}

std::string describe(const Rec& r) {
    std::string s = r.op + " #" + std::to_string(r.seq) + " (" + std::to_string(r.bytes) + " bytes";
    if (r.peer >= 0) s += std::string(r.dir == "send" ? ", to" : ", from") + " world rank " + std::to_string(r.peer) + ", tag " + std::to_string(r.tag);
    return s + ")";
}

bool unfinished(const Rec& r) { return r.state == "queued" || r.state == "running" || r.state == "failed"; }

// An operation still open when the dump was taken that has waited less than this is in progress, not
// stuck (a SIGUSR1 dump of a healthy job catches one now and then); failed ones always count.
constexpr double kInProgressS = 1.0;
bool stuck(const Rec& r) { return r.state == "failed" || (unfinished(r) && r.waited >= kInProgressS); }

}  // namespace

std::string analyse(const std::vector<json>& dumps, std::vector<int>* stalled) {
    SHARDLM_CHECK(!dumps.empty(), "flight analysis: no dump to read");
    // group key (name + members) -> per world rank: collectives by seq; p2p by (peer, dir) then seq
    struct GroupView {
        std::string name;
        std::vector<int> members;
        std::map<int, std::map<uint64_t, Rec>> coll;                               // rank -> seq -> rec
        std::map<int, std::map<std::pair<int, std::string>, std::map<uint64_t, Rec>>> p2p;  // rank -> (peer, dir) -> seq -> rec
    };
    std::map<std::string, GroupView> groups;
    std::set<int> have;
    std::set<int> waiting;  // ranks whose own record shows them stuck in an operation (waiting for another)
    std::map<int, double> quiet;  // seconds from a rank's last communication event (issue, start or end) to its dump
    std::map<int, std::string> reasons;
    int world = 0;
    for (const json& d : dumps) {
        const int r = d.at("world_rank").get<int>();
        have.insert(r);
        const std::string why = d.value("reason", "");
        reasons[r] = why.substr(0, std::min(why.find('\n'), size_t(160)));
        const double now = d.at("now").get<double>();
        const json& gs = d.at("groups");
        double last = -1;  // the rank's last communication event
        for (const json& o : d.at("ops")) {
            for (const char* t : {"t_issue", "t_start", "t_end"}) last = std::max(last, o.value(t, 0.0));
            const json& g = gs.at(o.at("group").get<size_t>());
            const std::vector<int> members = g.at("members").get<std::vector<int>>();
            for (int m : members) world = std::max(world, m + 1);
            const std::string key = g.at("name").get<std::string>() + "[" + join(members) + "]";
            GroupView& v = groups[key];
            v.name = g.at("name").get<std::string>();
            v.members = members;
            Rec x;
            x.rank = r;
            x.seq = o.at("seq").get<uint64_t>();
            x.bytes = o.at("bytes").get<uint64_t>();
            x.op = o.at("op").get<std::string>();
            x.state = o.at("state").get<std::string>();
            const double t0 = o.at("t_start").get<double>() > 0 ? o.at("t_start").get<double>() : o.at("t_issue").get<double>();
            x.waited = x.state == "done" ? 0 : now - t0;
            if (o.contains("peer")) {
                x.peer = o.at("peer").get<int>();
                x.tag = o.at("tag").get<int>();
                x.dir = o.at("dir").get<std::string>();
                if (stuck(x)) waiting.insert(r);
                v.p2p[r][{x.peer, x.dir}][x.seq] = x;
            } else {
                if (stuck(x)) waiting.insert(r);
                v.coll[r][x.seq] = x;
            }
        }
        quiet[r] = last < 0 ? now : now - last;
    }
    std::ostringstream out;
    std::set<int> culprits;
    std::vector<std::string> findings;
    for (auto& [key, v] : groups) {
        const std::string gname = "group '" + v.name + "' (world ranks " + join(v.members) + ")";
        // collectives: the first sequence number where the members disagree
        uint64_t lo = 0, hi = 0;
        bool any = false;
        for (auto& [r, m] : v.coll) {
            if (m.empty()) continue;
            lo = any ? std::min(lo, m.begin()->first) : m.begin()->first;
            hi = any ? std::max(hi, m.rbegin()->first) : m.rbegin()->first;
            any = true;
        }
        for (uint64_t s = lo; any && s <= hi; s++) {
            std::vector<const Rec*> at;
            std::vector<int> missing;  // members with a dump that never issued s (and whose records reach back to s)
            std::vector<int> no_dump;
            for (int m : v.members) {
                if (!have.count(m)) {
                    no_dump.push_back(m);
                    continue;
                }
                auto rm = v.coll.find(m);
                if (rm == v.coll.end() || rm->second.empty()) {
                    missing.push_back(m);
                    continue;
                }
                auto it = rm->second.find(s);
                if (it != rm->second.end()) at.push_back(&it->second);
                else if (rm->second.rbegin()->first < s) missing.push_back(m);
                // else: older than this rank's ring holds; unknown
            }
            if (at.empty()) continue;
            // different operations at the same position: the program diverged
            const Rec* first = at.front();
            for (const Rec* x : at) {
                if (x->op != first->op || x->bytes != first->bytes) {
                    std::string f = "MISMATCH on " + gname + " at collective #" + std::to_string(s) + ":";
                    for (const Rec* y : at) f += "\n  world rank " + std::to_string(y->rank) + " issued " + describe(*y) + ", " + y->state;
                    f += "\n  the ranks issue different collectives in the same place: their programs diverged (different settings, data or a bug)";
                    findings.push_back(f);
                    goto next_group;
                }
            }
            {
                bool pending = false;
                for (const Rec* x : at) pending |= stuck(*x);
                if (!pending) continue;  // everyone who has it finished it: skew, not a hang
                if (missing.empty() && no_dump.empty()) {
                    std::string f = "on " + gname + ": every rank entered " + describe(*first) + " and it did not finish:";
                    for (const Rec* x : at) f += "\n  world rank " + std::to_string(x->rank) + ": " + x->state + (unfinished(*x) ? " for " + fmt_s(x->waited) : "");
                    f += "\n  a message was lost or a rank failed inside it";
                    findings.push_back(f);
                    goto next_group;
                }
                std::string f = "on " + gname + ": ";
                std::vector<int> in;
                for (const Rec* x : at) in.push_back(x->rank);
                for (int m : missing) {
                    culprits.insert(m);
                    const auto& rm = v.coll[m];
                    f += "world rank " + std::to_string(m) + " did not enter " + first->op + " #" + std::to_string(s) + " (" +
                         std::to_string(first->bytes) + " bytes)";
                    if (!rm.empty()) f += "; its last collective there was " + describe(rm.rbegin()->second) + ", " + rm.rbegin()->second.state;
                    f += "\n";
                }
                for (int m : no_dump) {
                    culprits.insert(m);
                    f += "world rank " + std::to_string(m) + " left no flight record (stopped, killed or stuck where it could not write one)\n";
                }
                f += "  entered by world rank" + std::string(in.size() > 1 ? "s " : " ") + join(in) + ":";
                for (const Rec* x : at)
                    f += "\n  world rank " + std::to_string(x->rank) + ": " + x->state +
                         (x->state == "failed" ? " after " + fmt_s(x->waited) : unfinished(*x) ? ", waiting " + fmt_s(x->waited) : "");
                findings.push_back(f);
                goto next_group;
            }
        }
    next_group:
        // point-to-point: an unfinished send (recv) whose peer never posted the matching recv (send)
        for (auto& [r, chans] : v.p2p) {
            for (auto& [chan, seqs] : chans) {
                const auto [peer, dir] = chan;
                for (auto& [s, x] : seqs) {
                    if (!stuck(x)) continue;
                    const std::string other = dir == "send" ? "recv" : "send";
                    std::string f;
                    if (!have.count(peer)) {
                        f = "on " + gname + ": world rank " + std::to_string(r) + "'s " + describe(x) + " waits " + fmt_s(x.waited) +
                            " for world rank " + std::to_string(peer) + ", which left no flight record (stopped, killed or stuck where it could not write one)";
                    } else {
                        uint64_t peer_max = 0;
                        bool peer_any = false;
                        auto pr = v.p2p.find(peer);
                        if (pr != v.p2p.end()) {
                            auto pc = pr->second.find({r, other});
                            if (pc != pr->second.end() && !pc->second.empty()) {
                                peer_max = pc->second.rbegin()->first;
                                peer_any = true;
                            }
                        }
                        if (peer_any && peer_max >= s) continue;  // the peer posted its side: not this one
                        f = "on " + gname + ": world rank " + std::to_string(peer) + " did not post the " + other + " #" +
                            std::to_string(s) + (other == "recv" ? " from" : " to") + " world rank " + std::to_string(r) + " (" +
                            std::to_string(x.bytes) + " bytes, tag " + std::to_string(x.tag) + "): world rank " + std::to_string(r) +
                            "'s " + x.dir + " has waited " + fmt_s(x.waited) +
                            (peer_any ? "; the peer's last was #" + std::to_string(peer_max) : "; the peer has posted none");
                    }
                    culprits.insert(peer);
                    findings.push_back(f);
                    break;  // the first per channel
                }
            }
        }
    }
    out << "flight records of " << have.size() << " of " << world << " ranks (";
    bool comma = false;
    for (auto& [r, why] : reasons) {
        out << (comma ? ", " : "") << "rank " << r << ": " << why;
        comma = true;
    }
    out << ")\n";
    std::vector<int> absent;
    for (int r = 0; r < world; r++)
        if (!have.count(r)) absent.push_back(r);
    if (!absent.empty()) out << "no record from world rank" << (absent.size() > 1 ? "s " : " ") << join(absent) << "\n";
    if (findings.empty()) {
        out << "the records agree: no rank is missing from an operation the others entered\n";
        return out.str();
    }
    // The root of the hang: a rank that did not enter and is not itself waiting for another (its record
    // shows it outside communication, and for a while: a rank that issued or finished an operation less
    // than kInProgressS before its dump is working, maybe slowly, not stalled); failing that, any rank
    // whose record shows it so while the others wait (the ranks that only waited for it can be killed
    // by mpirun before they write a record, and are then the ones a finding points at: dp2 x pp2 on a
    // loaded machine named rank 1 for a stalled rank 3); failing that, the ranks a finding points at
    // that left no record (the stalled rank killed before it wrote one, while its busy pipeline peer
    // wrote one mid-step: the same layout named rank 1 so once); the ranks a finding points at last.
    auto idle = [&](int r) { return have.count(r) && !waiting.count(r) && quiet[r] >= kInProgressS; };
    std::vector<int> roots;
    for (int c : culprits)
        if (idle(c)) roots.push_back(c);
    if (roots.empty())
        for (int r : have)
            if (idle(r)) roots.push_back(r);
    if (roots.empty())
        for (int c : culprits)
            if (!have.count(c)) roots.push_back(c);
    if (roots.empty()) roots.assign(culprits.begin(), culprits.end());
    if (stalled) *stalled = roots;
    if (!roots.empty()) out << "stalled: world rank" << (roots.size() > 1 ? "s " : " ") << join(roots) << "\n";
    for (const std::string& f : findings) out << f << (f.back() == '\n' ? "" : "\n");
    return out.str();
}

std::string analyse(const std::string& dir, std::vector<int>* stalled) {
    namespace fs = std::filesystem;
    SHARDLM_CHECK(fs::is_directory(dir), "flight records: '", dir, "' is not a directory",
                  "\n---> HINT: the flight/ directory inside the run's --out (or --flight-dir)");
    std::vector<json> dumps;
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("rank", 0) == 0 && e.path().extension() == ".json") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) dumps.push_back(io::read_json_file(f));
    SHARDLM_CHECK(!dumps.empty(), "flight records: no rank*.json in '", dir, "'",
                  "\n---> HINT: dumps are written on --comm-timeout, a fatal error, SIGUSR1 or SIGTERM when --out (or --flight-dir) is set");
    return analyse(dumps, stalled);
}

}  // namespace shardlm::comm::flight
