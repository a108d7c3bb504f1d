// comm/group.cpp: Group (collectives and point-to-point on one communicator, run by the communication thread or the caller, comm/progress.h)
// and Request. The ring algorithms are in comm/ring.cpp, the cost counting and theory in comm/stats.cpp.
#include "shardlm/comm/group.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <utility>

#include "shardlm/comm/progress.h"
#include "shardlm/comm/flight.h"
#include "shardlm/comm/mpi_collectives.h"
#include "shardlm/comm/mpi_call.h"
#include "shardlm/comm/ring.h"
#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"
#include "shardlm/core/trace.h"

namespace shardlm::comm {

using detail::chain_broadcast;
using detail::progress;
using detail::Max;
using detail::MpiLock;
using detail::Op;
using detail::post_recv;
using detail::post_send;
using detail::ring_all_gather;
using detail::ring_all_reduce;
using detail::mpi_all_reduce;
using detail::ring_reduce_scatter;
using detail::Sum;

namespace detail {

struct GroupState {
    MPI_Comm coll = MPI_COMM_NULL;  // our collectives (ring messages)
    MPI_Comm p2p = MPI_COMM_NULL;   // the user's send/recv, so that user tags never meet ours
    int rank = 0, size = 1;
    std::vector<int> members;
    CommStats stats;
    std::string name;
    std::deque<std::pair<int, std::vector<unsigned char>>> mailbox;  // self group send -> recv
    uint64_t coll_seq = 0;                         // collectives issued (the flight recorder's numbering)
    int flight_group = -1;                         // the recorder's index of this group under flight_name
    std::string flight_name;
    std::map<std::pair<int, bool>, uint64_t> p2p_seq;  // (peer, send) -> messages issued

    bool is_mpi() const { return coll != MPI_COMM_NULL; }

    ~GroupState() {
        if (!is_mpi()) return;
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        auto op = std::make_shared<Op>();
        MPI_Comm* c = &coll;
        MPI_Comm* p = &p2p;
        op->group = this;
        op->body = [c, p](Op&) {
            MpiLock lock;
            SHARDLM_MPI_CHECK(MPI_Comm_free(c));
            SHARDLM_MPI_CHECK(MPI_Comm_free(p));
        };
        try {
            progress().run(op);  // after every operation queued on these communicators
        } catch (...) {
        }
    }
};

std::string describe_op(const Op& op) {
    std::string out(op_name(op.kind));
    if (const auto* g = static_cast<const GroupState*>(op.group)) {
        out += " on group '" + (g->name.empty() ? std::string("unnamed") : g->name) + "' (rank " + std::to_string(g->rank) +
               " of " + std::to_string(g->size) + ", world rank " + std::to_string(world_rank()) + ")";
    }
    return out;
}

}  // namespace detail

using detail::GroupState;

// ---------------------------------------------------------------------------------------------
// Helpers (the ring algorithms themselves are in comm/ring.cpp)

namespace {

// payload: the bytes of the operation's buffer (what the flight recorder compares between ranks).
// Point-to-point: peer (group rank), tag and direction.
std::shared_ptr<Op> make_op(OpKind kind, size_t payload, std::function<void(Op&)> body, bool p2p = false, int peer = -1,
                            int tag = -1, bool send = false) {
    auto op = std::make_shared<Op>();
    op->kind = kind;
    op->payload = payload;
    op->peer = peer;
    op->tag = tag;
    op->send = send;
    op->body = std::move(body);
    op->p2p = p2p;
    return op;
}

void check_rank(int r, int size, const char* what, const char* op) {
    SHARDLM_CHECK(r >= 0 && r < size, op, ": ", what, " rank ", r, " out of range for a group of size ", size);
}

void check_tag(int tag, const char* op) {
    SHARDLM_CHECK(tag >= 0 && tag <= 32767, op, ": tag ", tag, " out of range [0, 32767]");
}

void init_from(GroupState& s, MPI_Comm coll) {
    // Takes ownership of coll; creates the p2p duplicate; caches rank, size and world ranks.
    s.coll = coll;
    SHARDLM_MPI_CHECK(MPI_Comm_set_errhandler(s.coll, MPI_ERRORS_RETURN));
    SHARDLM_MPI_CHECK(MPI_Comm_dup(s.coll, &s.p2p));
    SHARDLM_MPI_CHECK(MPI_Comm_set_errhandler(s.p2p, MPI_ERRORS_RETURN));
    SHARDLM_MPI_CHECK(MPI_Comm_rank(s.coll, &s.rank));
    SHARDLM_MPI_CHECK(MPI_Comm_size(s.coll, &s.size));
    MPI_Group g, wg;
    SHARDLM_MPI_CHECK(MPI_Comm_group(s.coll, &g));
    SHARDLM_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    std::vector<int> ranks(size_t(s.size));
    for (int i = 0; i < s.size; i++) ranks[size_t(i)] = i;
    s.members.assign(size_t(s.size), 0);
    SHARDLM_MPI_CHECK(MPI_Group_translate_ranks(g, s.size, ranks.data(), wg, s.members.data()));
    SHARDLM_MPI_CHECK(MPI_Group_free(&g));
    SHARDLM_MPI_CHECK(MPI_Group_free(&wg));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Request

Request::Request(std::shared_ptr<Op> op, std::shared_ptr<GroupState> g) : op_(std::move(op)), group_(std::move(g)) {}

Request& Request::operator=(Request&& o) noexcept {
    if (this != &o) {
        if (op_) {
            try {
                wait();
            } catch (...) {
            }
        }
        op_ = std::move(o.op_);
        group_ = std::move(o.group_);
    }
    return *this;
}

Request::~Request() { settle(); }

void Request::settle() noexcept {
    if (!op_) return;
    try {
        wait();
    } catch (...) {
    }
}

namespace {
void trace_op(const GroupState& g, const Op& op, double t0, double t1) {
    if (!trace::enabled() || (g.size == 1 && !op.p2p)) return;  // the identity moves nothing
    trace::record(std::string(op_name(op.kind)), g.name.empty() ? "comm" : g.name, t0, t1,
                  "\"bytes\": " + std::to_string(op.bytes_sent));
}
}  // namespace

void Request::finish() {
    std::shared_ptr<Op> op = std::move(op_);
    if (!op->error) {
        OpStats& st = group_->stats[op->kind];
        st.calls++;
        st.bytes_sent += op->bytes_sent;
        st.seconds += now_s() - op->t_submit;
        st.busy_seconds += op->t_end > op->t_start ? op->t_end - op->t_start : 0.0;
        trace_op(*group_, *op, op->t_start, op->t_end > op->t_start ? op->t_end : now_s());
    }
    group_.reset();
    if (op->error) std::rethrow_exception(op->error);
}

void Request::wait() {
    if (!op_) return;
    progress().wait(*op_);
    finish();
}

bool Request::test() {
    if (!op_) return true;
    if (!progress().test(*op_)) return false;
    finish();
    return true;
}

// ---------------------------------------------------------------------------------------------
// Group

Group::Group(std::shared_ptr<GroupState> s) : s_(std::move(s)) {}
Group::Group(Group&&) noexcept = default;
Group& Group::operator=(Group&&) noexcept = default;
Group::~Group() = default;

Group Group::self() {
    auto s = std::make_shared<GroupState>();
    s->members = {world_rank()};
    return Group(std::move(s));
}

Group Group::from_comm(MPI_Comm comm) {
    auto s = std::make_shared<GroupState>();
    GroupState* sp = s.get();
    progress().run(make_op(OpKind::Barrier, 0, [sp, comm](Op&) {
        MpiLock lock;
        MPI_Comm c;
        SHARDLM_MPI_CHECK(MPI_Comm_dup(comm, &c));
        init_from(*sp, c);
    }));
    return Group(std::move(s));
}

Group Group::split(int color, int key) const {
    if (!s_->is_mpi()) return self();
    auto s = std::make_shared<GroupState>();
    GroupState* sp = s.get();
    MPI_Comm parent = s_->coll;
    auto op = make_op(OpKind::Barrier, 0, [sp, parent, color, key](Op&) {
        MpiLock lock;
        MPI_Comm c;
        SHARDLM_MPI_CHECK(MPI_Comm_split(parent, color, key, &c));
        init_from(*sp, c);
    });
    op->group = s_.get();  // after the parent's queued operations
    progress().run(op);
    return Group(std::move(s));
}

void Group::set_name(std::string name) { s_->name = std::move(name); }
const std::string& Group::name() const { return s_->name; }
int Group::rank() const { return s_->rank; }
int Group::size() const { return s_->size; }
bool Group::is_self() const { return !s_->is_mpi(); }
const std::vector<int>& Group::members() const { return s_->members; }
MPI_Comm Group::raw_comm() const { return s_->coll; }
const CommStats& Group::stats() const { return s_->stats; }
void Group::reset_stats() { s_->stats = CommStats{}; }

// The flight recorder's entry for op (groups of one member move nothing and cannot hang).
static void record_issue(GroupState& s, Op& op) {
    if (s.size == 1 && !op.p2p) return;
    static const std::string kUnnamed = "unnamed";
    const std::string& name = s.name.empty() ? kUnnamed : s.name;
    if (s.flight_group < 0 || s.flight_name != name) {  // once, and again after a rename
        s.flight_group = flight::register_group({name, s.members});
        s.flight_name = name;
    }
    uint64_t seq = 0;
    if (op.kind == OpKind::SendRecv) seq = ++s.p2p_seq[{op.peer, op.send}];
    else seq = ++s.coll_seq;
    const int peer = op.peer >= 0 && size_t(op.peer) < s.members.size() ? s.members[size_t(op.peer)] : -1;
    flight::issued(op, s.flight_group, seq, op.payload, peer, op.tag, op.send);
}

void Group::run(std::shared_ptr<Op> op) {
    op->t_submit = now_s();
    op->group = s_.get();
    record_issue(*s_, *op);
    if (s_->size == 1 && !op->p2p) {  // identity collectives: no MPI, no communication thread
        op->body(*op);
    } else {
        progress().run(op);
    }
    OpStats& st = s_->stats[op->kind];
    st.calls++;
    st.bytes_sent += op->bytes_sent;
    const double t1 = now_s();
    st.seconds += t1 - op->t_submit;
    st.busy_seconds += t1 - op->t_submit;
    if (s_->size > 1) trace_op(*s_, *op, op->t_submit, t1);
}

Request Group::submit(std::shared_ptr<Op> op) {
    op->t_submit = now_s();
    op->group = s_.get();
    record_issue(*s_, *op);
    if (s_->size == 1 && !op->p2p) {
        try {
            op->body(*op);
        } catch (...) {
            op->error = std::current_exception();
        }
        op->done.store(true);
    } else {
        progress().submit(op);
    }
    return Request(std::move(op), s_);
}

// ---- bodies -----------------------------------------------------------------------------------

namespace {

template <typename T, typename F>
std::function<void(Op&)> all_reduce_body(const GroupState& s, T* data, size_t n, F f) {
    if (s.size == 1 || n == 0) return [](Op&) {};
    MPI_Comm c = s.coll;
    int r = s.rank, size = s.size;
    if (collectives() == CollectivesBackend::Mpi) return [=](Op& op) { mpi_all_reduce(op, c, r, size, data, n, f); };
    return [=](Op& op) { ring_all_reduce(op, c, r, size, data, n, f); };
}

template <typename T, typename F = Sum>
std::function<void(Op&)> reduce_scatter_body(const GroupState& s, const T* in, T* out, size_t m, F f = {}) {
    if (s.size == 1)
        return [=](Op&) {
            if (in != out && m) std::memmove(out, in, m * sizeof(T));
        };
    MPI_Comm c = s.coll;
    int r = s.rank, size = s.size;
    if (collectives() == CollectivesBackend::Mpi)
        return [=](Op& op) { detail::mpi_reduce_scatter(op, c, r, size, in, out, m, f); };
    return [=](Op& op) { ring_reduce_scatter(op, c, r, size, in, out, m, f); };
}

using u16 = unsigned short;

std::function<void(Op&)> all_reduce16_body(const GroupState& s, void* data, size_t n, DType t) {
    if (t == DType::BF16) return all_reduce_body(s, static_cast<u16*>(data), n, detail::Sum16<DType::BF16>{});
    SHARDLM_CHECK(t == DType::F16, "all_reduce_sum: unsupported element type");
    return all_reduce_body(s, static_cast<u16*>(data), n, detail::Sum16<DType::F16>{});
}

std::function<void(Op&)> reduce_scatter16_body(const GroupState& s, const void* in, void* out, size_t m, DType t) {
    const auto* i = static_cast<const u16*>(in);
    auto* o = static_cast<u16*>(out);
    if (t == DType::BF16) return reduce_scatter_body(s, i, o, m, detail::Sum16<DType::BF16>{});
    SHARDLM_CHECK(t == DType::F16, "reduce_scatter_sum: unsupported element type");
    return reduce_scatter_body(s, i, o, m, detail::Sum16<DType::F16>{});
}

std::function<void(Op&)> all_gather_body(const GroupState& s, const void* in, void* out, size_t b) {
    if (s.size == 1)
        return [=](Op&) {
            if (in != out && b) std::memmove(out, in, b);
        };
    MPI_Comm c = s.coll;
    int r = s.rank, size = s.size;
    if (collectives() == CollectivesBackend::Mpi) return [=](Op& op) { detail::mpi_all_gather(op, c, r, size, in, out, b); };
    return [=](Op& op) { ring_all_gather(op, c, r, size, in, out, b); };
}

std::function<void(Op&)> broadcast_body(const GroupState& s, void* data, size_t bytes, int root) {
    check_rank(root, s.size, "root", "broadcast");
    if (s.size == 1) return [](Op&) {};
    MPI_Comm c = s.coll;
    int r = s.rank, size = s.size;
    if (collectives() == CollectivesBackend::Mpi)
        return [=](Op& op) { detail::mpi_broadcast(op, c, r, size, data, bytes, root); };
    return [=](Op& op) { chain_broadcast(op, c, r, size, data, bytes, root); };
}

}  // namespace

void Group::all_reduce_sum(float* data, size_t n) { run(make_op(OpKind::AllReduce, n * 4, all_reduce_body(*s_, data, n, Sum{}))); }
void Group::all_reduce_sum(double* data, size_t n) { run(make_op(OpKind::AllReduce, n * 8, all_reduce_body(*s_, data, n, Sum{}))); }
void Group::all_reduce_max(float* data, size_t n) { run(make_op(OpKind::AllReduce, n * 4, all_reduce_body(*s_, data, n, Max{}))); }
void Group::all_reduce_max(double* data, size_t n) { run(make_op(OpKind::AllReduce, n * 8, all_reduce_body(*s_, data, n, Max{}))); }

void Group::reduce_scatter_sum(const float* in, float* out, size_t n_per_rank) {
    run(make_op(OpKind::ReduceScatter, n_per_rank * 4 * size_t(s_->size), reduce_scatter_body(*s_, in, out, n_per_rank)));
}
void Group::all_gather(const float* in, float* out, size_t n_per_rank) {
    run(make_op(OpKind::AllGather, n_per_rank * 4 * size_t(s_->size), all_gather_body(*s_, in, out, n_per_rank * sizeof(float))));
}
void Group::all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) {
    run(make_op(OpKind::AllGather, bytes_per_rank * size_t(s_->size), all_gather_body(*s_, in, out, bytes_per_rank)));
}
void Group::all_to_all_bytes(const void* in, const size_t* send, const size_t* send_off, void* out, const size_t* recv,
                             const size_t* recv_off) {
    const GroupState& s = *s_;
    MPI_Comm c = s.coll;
    const int r = s.rank, n = s.size;
    // the counts live in the caller's arrays until the blocking call returns; payloads differ between ranks,
    // so the flight recorder is given none to compare
    run(make_op(OpKind::AllToAll, 0, [=](Op& op) {
        if (n == 1) {
            if (send[0]) std::memmove(static_cast<char*>(out) + recv_off[0], static_cast<const char*>(in) + send_off[0], send[0]);
            return;
        }
        pairwise_all_to_all(op, c, r, n, in, send, send_off, out, recv, recv_off);
    }));
}

void Group::broadcast(float* data, size_t n, int root) {
    run(make_op(OpKind::Broadcast, n * 4, broadcast_body(*s_, data, n * sizeof(float), root)));
}
void Group::broadcast_bytes(void* data, size_t bytes, int root) {
    run(make_op(OpKind::Broadcast, bytes, broadcast_body(*s_, data, bytes, root)));
}

void Group::all_reduce_sum(void* data, size_t n, DType t) {
    if (t == DType::F32) return all_reduce_sum(static_cast<float*>(data), n);
    run(make_op(OpKind::AllReduce, n * 2, all_reduce16_body(*s_, data, n, t)));
}
Request Group::iall_reduce_sum(void* data, size_t n, DType t) {
    if (t == DType::F32) return iall_reduce_sum(static_cast<float*>(data), n);
    return submit(make_op(OpKind::AllReduce, n * 2, all_reduce16_body(*s_, data, n, t)));
}
Request Group::ireduce_scatter_sum(const void* in, void* out, size_t n_per_rank, DType t) {
    if (t == DType::F32) return ireduce_scatter_sum(static_cast<const float*>(in), static_cast<float*>(out), n_per_rank);
    return submit(make_op(OpKind::ReduceScatter, n_per_rank * 2 * size_t(s_->size), reduce_scatter16_body(*s_, in, out, n_per_rank, t)));
}

Request Group::iall_reduce_sum(float* data, size_t n) {
    return submit(make_op(OpKind::AllReduce, n * 4, all_reduce_body(*s_, data, n, Sum{})));
}
Request Group::ireduce_scatter_sum(const float* in, float* out, size_t n_per_rank) {
    return submit(make_op(OpKind::ReduceScatter, n_per_rank * 4 * size_t(s_->size), reduce_scatter_body(*s_, in, out, n_per_rank)));
}
Request Group::iall_gather(const float* in, float* out, size_t n_per_rank) {
    return submit(make_op(OpKind::AllGather, n_per_rank * 4 * size_t(s_->size), all_gather_body(*s_, in, out, n_per_rank * sizeof(float))));
}
Request Group::iall_gather_bytes(const void* in, void* out, size_t bytes_per_rank) {
    return submit(make_op(OpKind::AllGather, bytes_per_rank * size_t(s_->size), all_gather_body(*s_, in, out, bytes_per_rank)));
}
Request Group::ibroadcast(float* data, size_t n, int root) {
    return submit(make_op(OpKind::Broadcast, n * 4, broadcast_body(*s_, data, n * sizeof(float), root)));
}

void Group::barrier() {
    if (s_->size == 1) {
        run(make_op(OpKind::Barrier, 0, [](Op&) {}));
        return;
    }
    MPI_Comm c = s_->coll;
    run(make_op(OpKind::Barrier, 0, [c](Op&) {
        MPI_Request rq;
        {
            MpiLock lock;
            SHARDLM_MPI_CHECK(MPI_Ibarrier(c, &rq));
        }
        progress().wait_requests(&rq, 1);
    }));
}

// ---- point-to-point ---------------------------------------------------------------------------

namespace {

// The self group has no MPI: a send is parked in a mailbox and taken by the next recv of its tag.
void self_send(GroupState& s, const void* data, size_t bytes, int tag) {
    const auto* p = static_cast<const unsigned char*>(data);
    s.mailbox.emplace_back(tag, std::vector<unsigned char>(p, p + bytes));
}

void self_recv(GroupState& s, void* data, size_t bytes, int tag) {
    auto it = std::find_if(s.mailbox.begin(), s.mailbox.end(), [&](const auto& m) { return m.first == tag; });
    SHARDLM_CHECK(it != s.mailbox.end(), "recv on a self group: no message with tag ", tag,
                  " was sent (it would wait forever)");
    SHARDLM_CHECK(it->second.size() <= bytes, "recv on a self group: message of ", it->second.size(),
                  " bytes does not fit in ", bytes, " bytes");
    if (!it->second.empty()) std::memcpy(data, it->second.data(), it->second.size());
    s.mailbox.erase(it);
}

// A send or receive of this group as an operation; the blocking and non-blocking calls run or submit it.
std::shared_ptr<Op> send_op(GroupState& s, const void* data, size_t bytes, int dst, int tag, const char* what) {
    check_rank(dst, s.size, "destination", what);
    check_tag(tag, what);
    if (!s.is_mpi()) {
        return make_op(OpKind::SendRecv, bytes, [st = &s, data, bytes, tag](Op& op) {
            self_send(*st, data, bytes, tag);
            op.bytes_sent = bytes;
        });
    }
    MPI_Comm c = s.p2p;
    return make_op(OpKind::SendRecv, bytes, [=](Op& op) { post_send(data, bytes, dst, tag, c, op.reqs, op.bytes_sent, true); },
                   true, dst, tag, true);
}

std::shared_ptr<Op> recv_op(GroupState& s, void* data, size_t bytes, int src, int tag, const char* what) {
    check_rank(src, s.size, "source", what);
    check_tag(tag, what);
    if (!s.is_mpi())
        return make_op(OpKind::SendRecv, bytes, [st = &s, data, bytes, tag](Op&) { self_recv(*st, data, bytes, tag); });
    MPI_Comm c = s.p2p;
    return make_op(OpKind::SendRecv, bytes, [=](Op& op) { post_recv(data, bytes, src, tag, c, op.reqs, true); }, true, src,
                   tag, false);
}

}  // namespace

void Group::send(const void* data, size_t bytes, int dst, int tag) { run(send_op(*s_, data, bytes, dst, tag, "send")); }
void Group::recv(void* data, size_t bytes, int src, int tag) { run(recv_op(*s_, data, bytes, src, tag, "recv")); }
Request Group::isend(const void* data, size_t bytes, int dst, int tag) {
    return submit(send_op(*s_, data, bytes, dst, tag, "isend"));
}
Request Group::irecv(void* data, size_t bytes, int src, int tag) {
    return submit(recv_op(*s_, data, bytes, src, tag, "irecv"));
}

}  // namespace shardlm::comm
