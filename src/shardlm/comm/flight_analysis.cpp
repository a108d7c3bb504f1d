// comm/flight_analysis.cpp: reading the flight recorder's dumps of every rank and saying where they
// disagree (`shardlm report --flight DIR`, and `shardlm launch` after a failed attempt).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
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
    bool p2p = false;  // a send or receive (peer, tag, dir), not a collective
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

// A rank whose record shows it did not run for kStoppedS or more, ending at most kRecentS before its dump
// (comm/flight.cpp: the watcher's late ticks), was stopped (SIGSTOP, a debugger) or starved: the others
// waited for it, wherever it stood, inside a collective or outside communication.
constexpr double kStoppedS = 2.0, kRecentS = 120.0;

// One communication group as the dumps saw it: collectives by rank and sequence number; point-to-point
// operations by rank, (peer, direction) and sequence number.
struct GroupView {
    std::string name;
    std::vector<int> members;
    std::map<int, std::map<uint64_t, Rec>> coll;                                        // rank -> seq -> rec
    std::map<int, std::map<std::pair<int, std::string>, std::map<uint64_t, Rec>>> p2p;  // rank -> (peer, dir) -> seq -> rec
    std::string title() const { return "group '" + name + "' (world ranks " + join(members) + ")"; }
};

// Every rank's dump, read into groups.
struct Records {
    std::map<std::string, GroupView> groups;  // by name + members
    std::set<int> have;                       // ranks that left a dump
    std::set<int> waiting;        // ranks whose own record shows them stuck in an operation (waiting for another)
    std::map<int, double> quiet;  // seconds from a rank's last communication event (issue, start or end) to its dump
    std::map<int, std::string> reasons;
    std::map<int, json> last_step;  // a rank's "last_step": the metrics row of the last step it finished
    std::map<int, std::pair<double, double>> paused;  // a rank that did not run: (seconds, ended this long before its dump)
    int world = 0;
};

Rec read_op(const json& o, int rank, double now) {
    Rec x;
    x.rank = rank;
    x.seq = o.at("seq").get<uint64_t>();
    x.bytes = o.at("bytes").get<uint64_t>();
    x.op = o.at("op").get<std::string>();
    x.state = o.at("state").get<std::string>();
    const double t0 = o.at("t_start").get<double>() > 0 ? o.at("t_start").get<double>() : o.at("t_issue").get<double>();
    x.waited = x.state == "done" ? 0 : now - t0;
    if (o.contains("peer")) {
        x.p2p = true;
        x.peer = o.at("peer").get<int>();
        x.tag = o.at("tag").get<int>();
        x.dir = o.at("dir").get<std::string>();
    }
    return x;
}

Records read_records(const std::vector<json>& dumps) {
    Records a;
    for (const json& d : dumps) {
        const int r = d.at("world_rank").get<int>();
        a.have.insert(r);
        const std::string why = d.value("reason", "");
        a.reasons[r] = why.substr(0, std::min(why.find('\n'), size_t(160)));
        const double now = d.at("now").get<double>();
        const json& gs = d.at("groups");
        double last = -1;  // the rank's last communication event
        for (const json& o : d.at("ops")) {
            for (const char* t : {"t_issue", "t_start", "t_end"}) last = std::max(last, o.value(t, 0.0));
            const json& g = gs.at(o.at("group").get<size_t>());
            const std::vector<int> members = g.at("members").get<std::vector<int>>();
            for (int m : members) a.world = std::max(a.world, m + 1);
            GroupView& v = a.groups[g.at("name").get<std::string>() + "[" + join(members) + "]"];
            v.name = g.at("name").get<std::string>();
            v.members = members;
            const Rec x = read_op(o, r, now);
            if (stuck(x)) a.waiting.insert(r);
            if (x.p2p) v.p2p[r][{x.peer, x.dir}][x.seq] = x;
            else v.coll[r][x.seq] = x;
        }
        a.quiet[r] = last < 0 ? now : now - last;
        for (const json& p : d.value("pauses", json::array())) {  // the longest recent one
            const double secs = p.value("seconds", 0.0), ago = now - p.value("t", 0.0) - secs;
            if (secs >= kStoppedS && ago <= kRecentS && secs > a.paused[r].first) a.paused[r] = {secs, ago};
        }
        if (a.paused.count(r) && a.paused[r].first == 0) a.paused.erase(r);
        if (auto it = d.find("last_step"); it != d.end() && it->is_object()) a.last_step[r] = *it;
    }
    return a;
}

// The group's collectives at sequence number s: who issued it, who (with a dump reaching back to s) did
// not, who left no dump.
struct AtSeq {
    std::vector<const Rec*> at;
    std::vector<int> missing, no_dump;
};

AtSeq at_seq(const GroupView& v, const Records& a, uint64_t s) {
    AtSeq q;
    for (int m : v.members) {
        if (!a.have.count(m)) {
            q.no_dump.push_back(m);
            continue;
        }
        auto rm = v.coll.find(m);
        if (rm == v.coll.end() || rm->second.empty()) {
            q.missing.push_back(m);
            continue;
        }
        auto it = rm->second.find(s);
        if (it != rm->second.end()) q.at.push_back(&it->second);
        else if (rm->second.rbegin()->first < s) q.missing.push_back(m);
        // else: older than this rank's ring holds; unknown
    }
    return q;
}

// What is wrong at the group's first collective that was not finished by all who issued it ("" if
// nothing): different operations at one place, one that every member entered and none finished, or members
// that did not enter it (added to culprits).
std::string collective_finding(const GroupView& v, const Records& a, std::set<int>& culprits) {
    uint64_t lo = 0, hi = 0;
    bool any = false;
    for (auto& [r, m] : v.coll) {
        if (m.empty()) continue;
        lo = any ? std::min(lo, m.begin()->first) : m.begin()->first;
        hi = any ? std::max(hi, m.rbegin()->first) : m.rbegin()->first;
        any = true;
    }
    const std::string gname = v.title();
    for (uint64_t s = lo; any && s <= hi; s++) {
        const AtSeq q = at_seq(v, a, s);
        if (q.at.empty()) continue;
        const Rec* first = q.at.front();
        for (const Rec* x : q.at) {
            if (x->op == first->op && x->bytes == first->bytes) continue;
            std::string f = "MISMATCH on " + gname + " at collective #" + std::to_string(s) + ":";
            for (const Rec* y : q.at) f += "\n  world rank " + std::to_string(y->rank) + " issued " + describe(*y) + ", " + y->state;
            return f + "\n  the ranks issue different collectives in the same place: their programs diverged (different settings, data or a bug)";
        }
        bool pending = false;
        for (const Rec* x : q.at) pending |= stuck(*x);
        if (!pending) continue;  // everyone who has it finished it: skew, not a hang
        if (q.missing.empty() && q.no_dump.empty()) {
            std::string f = "on " + gname + ": every rank entered " + describe(*first) + " and it did not finish:";
            for (const Rec* x : q.at) f += "\n  world rank " + std::to_string(x->rank) + ": " + x->state + (unfinished(*x) ? " for " + fmt_s(x->waited) : "");
            return f + "\n  a message was lost or a rank failed inside it";
        }
        std::string f = "on " + gname + ": ";
        std::vector<int> in;
        for (const Rec* x : q.at) in.push_back(x->rank);
        for (int m : q.missing) {
            culprits.insert(m);
            const auto& rm = v.coll.count(m) ? v.coll.at(m) : std::map<uint64_t, Rec>{};
            f += "world rank " + std::to_string(m) + " did not enter " + first->op + " #" + std::to_string(s) + " (" +
                 std::to_string(first->bytes) + " bytes)";
            if (!rm.empty()) f += "; its last collective there was " + describe(rm.rbegin()->second) + ", " + rm.rbegin()->second.state;
            f += "\n";
        }
        for (int m : q.no_dump) {
            culprits.insert(m);
            f += "world rank " + std::to_string(m) + " left no flight record (stopped, killed or stuck where it could not write one)\n";
        }
        f += "  entered by world rank" + std::string(in.size() > 1 ? "s " : " ") + join(in) + ":";
        for (const Rec* x : q.at)
            f += "\n  world rank " + std::to_string(x->rank) + ": " + x->state +
                 (x->state == "failed" ? " after " + fmt_s(x->waited) : unfinished(*x) ? ", waiting " + fmt_s(x->waited) : "");
        return f;
    }
    return "";
}

// The last sequence number `peer` posted of direction `dir` towards `r` in the group (nullopt: none).
std::optional<uint64_t> peer_last(const GroupView& v, int peer, int r, const std::string& dir) {
    auto pr = v.p2p.find(peer);
    if (pr == v.p2p.end()) return std::nullopt;
    auto pc = pr->second.find({r, dir});
    if (pc == pr->second.end() || pc->second.empty()) return std::nullopt;
    return pc->second.rbegin()->first;
}

// Point-to-point: per channel, the first unfinished send (recv) whose peer never posted the matching recv
// (send); the peers are culprits.
void p2p_findings(const GroupView& v, const Records& a, std::set<int>& culprits, std::vector<std::string>& findings) {
    const std::string gname = v.title();
    for (auto& [r, chans] : v.p2p) {
        for (auto& [chan, seqs] : chans) {
            const auto& [peer, dir] = chan;
            for (auto& [s, x] : seqs) {
                if (!stuck(x)) continue;
                const std::string other = dir == "send" ? "recv" : "send";
                std::string f;
                if (!a.have.count(peer)) {
                    f = "on " + gname + ": world rank " + std::to_string(r) + "'s " + describe(x) + " waits " + fmt_s(x.waited) +
                        " for world rank " + std::to_string(peer) + ", which left no flight record (stopped, killed or stuck where it could not write one)";
                } else {
                    const std::optional<uint64_t> last = peer_last(v, peer, r, other);
                    if (last && *last >= s) continue;  // the peer posted its side: not this one
                    f = "on " + gname + ": world rank " + std::to_string(peer) + " did not post the " + other + " #" +
                        std::to_string(s) + (other == "recv" ? " from" : " to") + " world rank " + std::to_string(r) + " (" +
                        std::to_string(x.bytes) + " bytes, tag " + std::to_string(x.tag) + "): world rank " + std::to_string(r) +
                        "'s " + x.dir + " has waited " + fmt_s(x.waited) +
                        (last ? "; the peer's last was #" + std::to_string(*last) : "; the peer has posted none");
                }
                culprits.insert(peer);
                findings.push_back(f);
                break;  // the first per channel
            }
        }
    }
}

// The root of the hang: a rank that did not enter and is not itself waiting for another (its record
// shows it outside communication, and for a while: a rank that issued or finished an operation less
// than kInProgressS before its dump is working, maybe slowly, not stalled); failing that, any rank
// whose record shows it so while the others wait (the ranks that only waited for it can be killed
// by mpirun before they write a record, and are then the ones a finding points at: dp2 x pp2 on a
// loaded machine named rank 1 for a stalled rank 3); failing that, the ranks a finding points at
// that left no record (the stalled rank killed before it wrote one, while its busy pipeline peer
// wrote one mid-step: the same layout named rank 1 so once); the ranks a finding points at last.
std::vector<int> stalled_roots(const Records& a, const std::set<int>& culprits) {
    std::vector<int> stopped;
    for (const auto& [r, p] : a.paused) stopped.push_back(r);
    if (!stopped.empty()) return stopped;
    auto idle = [&](int r) { return a.have.count(r) && !a.waiting.count(r) && a.quiet.at(r) >= kInProgressS; };
    std::vector<int> roots;
    for (int c : culprits)
        if (idle(c)) roots.push_back(c);
    if (roots.empty())
        for (int r : a.have)
            if (idle(r)) roots.push_back(r);
    if (roots.empty())
        for (int c : culprits)
            if (!a.have.count(c)) roots.push_back(c);
    if (roots.empty()) roots.assign(culprits.begin(), culprits.end());
    return roots;
}

// "flight records of 3 of 4 ranks (rank 0: ...)" and the ranks without a record.
std::string records_header(const Records& a) {
    std::ostringstream out;
    out << "flight records of " << a.have.size() << " of " << a.world << " ranks (";
    bool comma = false;
    for (auto& [r, why] : a.reasons) {
        out << (comma ? ", " : "") << "rank " << r << ": " << why;
        comma = true;
    }
    out << ")\n";
    std::vector<int> absent;
    for (int r = 0; r < a.world; r++)
        if (!a.have.count(r)) absent.push_back(r);
    if (!absent.empty()) out << "no record from world rank" << (absent.size() > 1 ? "s " : " ") << join(absent) << "\n";
    return out.str();
}

std::string share(const json& row, const char* key) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3f", row.value(key, 0.0));
    return b;
}

// The step each rank last finished and, for a mixture of experts, the expert loads after the latest
// (the world's shares: the same on every rank that finished it): a hang in an all-to-all reads beside
// the loads that sized it.
std::string last_step_lines(const Records& a) {
    if (a.last_step.empty()) return "";
    std::map<int, std::vector<int>> by_step;  // steps finished -> world ranks
    for (const auto& [r, row] : a.last_step) by_step[row.value("step", -1) + 1].push_back(r);
    std::string out = "last step finished:";
    for (const auto& [s, ranks] : by_step)
        out.append(" ").append(std::to_string(s)).append(" (world rank").append(ranks.size() > 1 ? "s " : " ").append(join(ranks)).append(")");
    std::vector<int> none;
    for (int r : a.have)
        if (!a.last_step.count(r)) none.push_back(r);
    if (!none.empty()) out += " none (world rank" + std::string(none.size() > 1 ? "s " : " ") + join(none) + ")";
    out += "\n";
    const json& latest = a.last_step.at(by_step.rbegin()->second.front());
    const auto loads = latest.find("moe_load");
    if (loads == latest.end() || !loads->is_array()) return out;
    out += "expert loads after step " + std::to_string(by_step.rbegin()->first) +
           " (each layer's share of its choices: min / median / max, dropped):\n";
    for (const json& l : *loads)
        out += "  layer " + std::to_string(l.value("layer", -1)) + ": " + share(l, "min") + " / " + share(l, "median") +
               " / " + share(l, "max") + ", dropped " + share(l, "dropped") + "\n";
    return out;
}

}  // namespace

std::string analyse(const std::vector<json>& dumps, std::vector<int>* stalled) {
    SHARDLM_CHECK(!dumps.empty(), "flight analysis: no dump to read");
    const Records a = read_records(dumps);
    std::set<int> culprits;
    std::vector<std::string> findings;
    for (const auto& [key, v] : a.groups) {
        if (std::string f = collective_finding(v, a, culprits); !f.empty()) findings.push_back(f);
        p2p_findings(v, a, culprits, findings);
    }
    std::string out = records_header(a) + last_step_lines(a);
    for (const auto& [r, p] : a.paused)
        out.append("world rank ").append(std::to_string(r)).append(" did not run for ").append(fmt_s(p.first))
            .append(" (stopped by SIGSTOP or a debugger, or starved of CPU), until ").append(fmt_s(p.second)).append(" before its record\n");
    if (findings.empty() && a.paused.empty())
        return out + "the records agree: no rank is missing from an operation the others entered\n";
    const std::vector<int> roots = stalled_roots(a, culprits);
    if (stalled) *stalled = roots;
    if (!roots.empty()) out += "stalled: world rank" + std::string(roots.size() > 1 ? "s " : " ") + join(roots) + "\n";
    for (const std::string& f : findings) out += f + (f.back() == '\n' ? "" : "\n");
    return out;
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
    std::string unreadable;  // a rank's file that does not read (cut short by a kill, edited) is left out: the others still tell
    for (const std::string& f : files) {
        try {
            json d = io::read_json_file(f);
            SHARDLM_CHECK(d.is_object() && d.contains("world_rank") && d["world_rank"].is_number_integer() &&
                              d.contains("ops") && d.contains("groups") && d.contains("now"),
                          "not a flight record (no world_rank, ops, groups or now)");
            dumps.push_back(std::move(d));
        } catch (const std::exception& e) {
            const std::string why = e.what();
            unreadable.append("left out ").append(fs::path(f).filename().string()).append(": ");
            unreadable.append(why.substr(0, why.find('\n'))).append("\n");
        }
    }
    SHARDLM_CHECK(!dumps.empty(), "flight records: no readable rank*.json in '", dir, "'", unreadable.empty() ? "" : " (", unreadable,
                  unreadable.empty() ? "" : ")",
                  "\n---> HINT: dumps are written on --comm-timeout, a fatal error, SIGUSR1 or SIGTERM when --out (or --flight-dir) is set");
    return unreadable + analyse(dumps, stalled);
}

}  // namespace shardlm::comm::flight
