#include "shardlm/comm/group.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <iomanip>
#include <sstream>
#include <utility>

#include "shardlm/comm/engine.h"
#include "shardlm/comm/mpi_env.h"
#include "shardlm/core/check.h"
#include "shardlm/core/timer.h"

namespace shardlm::comm {

using detail::engine;
using detail::Op;

namespace detail {

struct GroupState {
    MPI_Comm coll = MPI_COMM_NULL;  // our collectives (ring messages)
    MPI_Comm p2p = MPI_COMM_NULL;   // the user's send/recv, so that user tags never meet ours
    int rank = 0, size = 1;
    std::vector<int> members;
    CommStats stats;
    std::deque<std::pair<int, std::vector<unsigned char>>> mailbox;  // self group send -> recv

    bool is_mpi() const { return coll != MPI_COMM_NULL; }

    ~GroupState() {
        if (!is_mpi()) return;
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (finalized) return;
        auto op = std::make_shared<Op>();
        MPI_Comm* c = &coll;
        MPI_Comm* p = &p2p;
        op->body = [c, p](Op&) {
            SHARDLM_MPI_CHECK(MPI_Comm_free(c));
            SHARDLM_MPI_CHECK(MPI_Comm_free(p));
        };
        try {
            engine().run(op);  // after every operation queued on these communicators
        } catch (...) {
        }
    }
};

}  // namespace detail

using detail::GroupState;

// ---------------------------------------------------------------------------------------------
// Stats

std::string_view op_name(OpKind k) {
    switch (k) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::SendRecv: return "send_recv";
    case OpKind::Barrier: return "barrier";
    }
    return "?";
}

uint64_t CommStats::total_bytes_sent() const {
    uint64_t b = 0;
    for (const auto& o : ops) b += o.bytes_sent;
    return b;
}

double CommStats::total_seconds() const {
    double s = 0;
    for (const auto& o : ops) s += o.seconds;
    return s;
}

// ---------------------------------------------------------------------------------------------
// Ring algorithms (run by the engine on whichever thread holds the MPI token)

namespace {

constexpr int kTagReduceScatter = 1, kTagAllGather = 2, kTagBroadcast = 3;
constexpr size_t kMaxMsg = size_t(1) << 30;  // MPI counts are int: cut larger messages

int mod(int a, int n) { return ((a % n) + n) % n; }

void post_send(const void* p, size_t bytes, int dst, int tag, MPI_Comm c, std::vector<MPI_Request>& reqs,
               uint64_t& sent, bool allow_empty = false) {
    const auto* b = static_cast<const unsigned char*>(p);
    if (bytes == 0 && !allow_empty) return;
    size_t off = 0;
    do {
        size_t k = std::min(kMaxMsg, bytes - off);
        reqs.emplace_back();
        SHARDLM_MPI_CHECK(MPI_Isend(b + off, int(k), MPI_BYTE, dst, tag, c, &reqs.back()));
        sent += k;
        off += k;
    } while (off < bytes);
}

void post_recv(void* p, size_t bytes, int src, int tag, MPI_Comm c, std::vector<MPI_Request>& reqs,
               bool allow_empty = false) {
    auto* b = static_cast<unsigned char*>(p);
    if (bytes == 0 && !allow_empty) return;
    size_t off = 0;
    do {
        size_t k = std::min(kMaxMsg, bytes - off);
        reqs.emplace_back();
        SHARDLM_MPI_CHECK(MPI_Irecv(b + off, int(k), MPI_BYTE, src, tag, c, &reqs.back()));
        off += k;
    } while (off < bytes);
}

void wait_all(std::vector<MPI_Request>& reqs) {
    engine().wait_requests(reqs.data(), int(reqs.size()));
    reqs.clear();
}

struct Sum {
    template <typename T>
    T operator()(T acc, T x) const { return acc + x; }
};
struct Max {
    template <typename T>
    T operator()(T acc, T x) const { return x > acc ? x : acc; }
};

// Elements per pipeline segment.
template <typename T>
size_t seg_elems() {
    return std::max<size_t>(1, std::min(segment_bytes(), kMaxMsg) / sizeof(T));
}

// One ring step with reduction: receive `rl` elements from prev while sending `sl` elements at src
// to next, both cut into segments; as each segment arrives, dst[i] = f(received[i], local[i]).
// Segments are received into a small ring of kSlots buffers that stays in cache (the data is
// added right after it lands, and the slot is reused) instead of a block-sized buffer that would
// round-trip through DRAM.
constexpr size_t kSlots = 4;

template <typename T>
T* slot_scratch() {
    return static_cast<T*>(engine().scratch(kSlots * seg_elems<T>() * sizeof(T), 0));
}

template <typename T, typename F>
void reduce_step(MPI_Comm c, int prev, int next, const T* src, size_t sl, size_t rl, const T* local, T* dst,
                 uint64_t& sent, F f) {
    const size_t seg = seg_elems<T>();
    const size_t nseg = (rl + seg - 1) / seg;
    T* slots = slot_scratch<T>();
    std::vector<MPI_Request> recvs, sends;
    recvs.reserve(nseg);
    auto post = [&](size_t k) {
        post_recv(slots + (k % kSlots) * seg, std::min(seg, rl - k * seg) * sizeof(T), prev, kTagReduceScatter, c,
                  recvs);
    };
    for (size_t k = 0; k < std::min(nseg, kSlots); k++) post(k);
    for (size_t o = 0; o < sl; o += seg)
        post_send(src + o, std::min(seg, sl - o) * sizeof(T), next, kTagReduceScatter, c, sends, sent);
    for (size_t k = 0; k < nseg; k++) {
        engine().wait_requests(&recvs[k], 1);
        const size_t o = k * seg, len = std::min(seg, rl - o);
        const T* a = slots + (k % kSlots) * seg;
        const T* x = local + o;
        T* d = dst + o;
        for (size_t i = 0; i < len; i++) d[i] = f(a[i], x[i]);
        if (k + kSlots < nseg) post(k + kSlots);
    }
    wait_all(sends);
}

struct Blocks {
    size_t base, rem;
    Blocks(size_t n, int parts) : base(n / size_t(parts)), rem(n % size_t(parts)) {}
    size_t off(int b) const { return base * size_t(b) + std::min(size_t(b), rem); }
    size_t len(int b) const { return base + (size_t(b) < rem ? 1 : 0); }
};

template <typename T, typename F>
void ring_all_reduce(Op& op, MPI_Comm c, int r, int n, T* data, size_t count, F f) {
    const Blocks bl(count, n);
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    for (int s = 0; s < n - 1; s++) {  // reduce-scatter: rank r ends with block r reduced
        const int sb = mod(r - s - 1, n), rb = mod(r - s - 2, n);
        reduce_step(c, prev, next, data + bl.off(sb), bl.len(sb), bl.len(rb), data + bl.off(rb), data + bl.off(rb),
                    op.bytes_sent, f);
    }
    std::vector<MPI_Request> reqs;
    for (int s = 0; s < n - 1; s++) {  // all-gather of the reduced blocks
        const int sb = mod(r - s, n), rb = mod(r - s - 1, n);
        post_recv(data + bl.off(rb), bl.len(rb) * sizeof(T), prev, kTagAllGather, c, reqs);
        post_send(data + bl.off(sb), bl.len(sb) * sizeof(T), next, kTagAllGather, c, reqs, op.bytes_sent);
        wait_all(reqs);
    }
}

template <typename T, typename F>
void ring_reduce_scatter(Op& op, MPI_Comm c, int r, int n, const T* in, T* out, size_t m, F f) {
    if (m == 0) return;
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    // Partial sums travel through two block-sized buffers (sent at step s+1 while step s+2 fills
    // the other); with 2 ranks there is a single step straight into out.
    T* acc[2] = {n > 2 ? static_cast<T*>(engine().scratch(m * sizeof(T), 1)) : nullptr,
                 n > 3 ? static_cast<T*>(engine().scratch(m * sizeof(T), 2)) : nullptr};
    const T* send_ptr = in + size_t(mod(r - 1, n)) * m;
    for (int s = 0; s < n - 1; s++) {
        const int rb = mod(r - s - 2, n);
        T* dst = s == n - 2 ? out : acc[s % 2];  // the last step lands block r in out
        reduce_step(c, prev, next, send_ptr, m, m, in + size_t(rb) * m, dst, op.bytes_sent, f);
        send_ptr = dst;
    }
}

void ring_all_gather(Op& op, MPI_Comm c, int r, int n, const void* in, void* out, size_t b) {
    if (b == 0) return;
    auto* o = static_cast<unsigned char*>(out);
    const int next = mod(r + 1, n), prev = mod(r - 1, n);
    std::vector<MPI_Request> reqs;
    for (int s = 0; s < n - 1; s++) {
        const int sb = mod(r - s, n), rb = mod(r - s - 1, n);
        post_recv(o + size_t(rb) * b, b, prev, kTagAllGather, c, reqs);
        // Step 0 sends our own block straight from `in`, and copies it into place while the peer
        // pulls it (the copy then costs no time: 6.6 -> 9.7 GB/s bus bandwidth at 1 MiB, 2 ranks).
        post_send(s == 0 ? in : o + size_t(sb) * b, b, next, kTagAllGather, c, reqs, op.bytes_sent);
        if (s == 0 && in != o + size_t(r) * b) std::memmove(o + size_t(r) * b, in, b);
        wait_all(reqs);
    }
}

// Pipelined chain root -> root+1 -> ... -> root-1: each rank forwards a segment as soon as it has it.
void chain_broadcast(Op& op, MPI_Comm c, int r, int n, void* data, size_t bytes, int root) {
    if (bytes == 0) return;
    auto* d = static_cast<unsigned char*>(data);
    const int pos = mod(r - root, n), next = mod(r + 1, n), prev = mod(r - 1, n);
    const size_t seg = std::min(segment_bytes(), kMaxMsg);
    std::vector<MPI_Request> recvs, sends;
    if (pos == 0) {
        for (size_t o = 0; o < bytes; o += seg)
            post_send(d + o, std::min(seg, bytes - o), next, kTagBroadcast, c, sends, op.bytes_sent);
        wait_all(sends);
        return;
    }
    for (size_t o = 0; o < bytes; o += seg) post_recv(d + o, std::min(seg, bytes - o), prev, kTagBroadcast, c, recvs);
    size_t k = 0;
    for (size_t o = 0; o < bytes; o += seg, k++) {
        engine().wait_requests(&recvs[k], 1);
        if (pos < n - 1) post_send(d + o, std::min(seg, bytes - o), next, kTagBroadcast, c, sends, op.bytes_sent);
    }
    wait_all(sends);
}

std::shared_ptr<Op> make_op(OpKind kind, std::function<void(Op&)> body, bool p2p = false) {
    auto op = std::make_shared<Op>();
    op->kind = kind;
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

Request::~Request() {
    if (!op_) return;
    try {
        wait();
    } catch (...) {
    }
}

void Request::finish() {
    std::shared_ptr<Op> op = std::move(op_);
    if (!op->error) {
        OpStats& st = group_->stats[op->kind];
        st.calls++;
        st.bytes_sent += op->bytes_sent;
        st.seconds += now_s() - op->t_submit;
        st.busy_seconds += op->t_end > op->t_start ? op->t_end - op->t_start : 0.0;
    }
    group_.reset();
    if (op->error) std::rethrow_exception(op->error);
}

void Request::wait() {
    if (!op_) return;
    engine().wait(*op_);
    finish();
}

bool Request::test() {
    if (!op_) return true;
    if (!op_->done.load(std::memory_order_acquire)) return false;
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
    engine().run(make_op(OpKind::Barrier, [sp, comm](Op&) {
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
    engine().run(make_op(OpKind::Barrier, [sp, parent, color, key](Op&) {
        MPI_Comm c;
        SHARDLM_MPI_CHECK(MPI_Comm_split(parent, color, key, &c));
        init_from(*sp, c);
    }));
    return Group(std::move(s));
}

int Group::rank() const { return s_->rank; }
int Group::size() const { return s_->size; }
bool Group::is_self() const { return !s_->is_mpi(); }
const std::vector<int>& Group::members() const { return s_->members; }
MPI_Comm Group::raw_comm() const { return s_->coll; }
const CommStats& Group::stats() const { return s_->stats; }
void Group::reset_stats() { s_->stats = CommStats{}; }

void Group::run(std::shared_ptr<Op> op) {
    op->t_submit = now_s();
    if (s_->size == 1 && !op->p2p) {  // identity collectives: no MPI, no engine
        op->body(*op);
    } else {
        engine().run(op);
    }
    OpStats& st = s_->stats[op->kind];
    st.calls++;
    st.bytes_sent += op->bytes_sent;
    st.seconds += now_s() - op->t_submit;
    st.busy_seconds += now_s() - op->t_submit;
}

Request Group::submit(std::shared_ptr<Op> op) {
    op->t_submit = now_s();
    if (s_->size == 1 && !op->p2p) {
        try {
            op->body(*op);
        } catch (...) {
            op->error = std::current_exception();
        }
        op->done.store(true);
    } else {
        engine().submit(op);
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
    return [=](Op& op) { ring_all_reduce(op, c, r, size, data, n, f); };
}

std::function<void(Op&)> reduce_scatter_body(const GroupState& s, const float* in, float* out, size_t m) {
    if (s.size == 1)
        return [=](Op&) {
            if (in != out && m) std::memmove(out, in, m * sizeof(float));
        };
    MPI_Comm c = s.coll;
    int r = s.rank, size = s.size;
    return [=](Op& op) { ring_reduce_scatter(op, c, r, size, in, out, m, Sum{}); };
}

std::function<void(Op&)> all_gather_body(const GroupState& s, const void* in, void* out, size_t b) {
    if (s.size == 1)
        return [=](Op&) {
            if (in != out && b) std::memmove(out, in, b);
        };
    MPI_Comm c = s.coll;
    int r = s.rank, size = s.size;
    return [=](Op& op) { ring_all_gather(op, c, r, size, in, out, b); };
}

std::function<void(Op&)> broadcast_body(const GroupState& s, void* data, size_t bytes, int root) {
    check_rank(root, s.size, "root", "broadcast");
    if (s.size == 1) return [](Op&) {};
    MPI_Comm c = s.coll;
    int r = s.rank, size = s.size;
    return [=](Op& op) { chain_broadcast(op, c, r, size, data, bytes, root); };
}

}  // namespace

void Group::all_reduce_sum(float* data, size_t n) { run(make_op(OpKind::AllReduce, all_reduce_body(*s_, data, n, Sum{}))); }
void Group::all_reduce_sum(double* data, size_t n) { run(make_op(OpKind::AllReduce, all_reduce_body(*s_, data, n, Sum{}))); }
void Group::all_reduce_max(float* data, size_t n) { run(make_op(OpKind::AllReduce, all_reduce_body(*s_, data, n, Max{}))); }
void Group::all_reduce_max(double* data, size_t n) { run(make_op(OpKind::AllReduce, all_reduce_body(*s_, data, n, Max{}))); }

void Group::reduce_scatter_sum(const float* in, float* out, size_t n_per_rank) {
    run(make_op(OpKind::ReduceScatter, reduce_scatter_body(*s_, in, out, n_per_rank)));
}
void Group::all_gather(const float* in, float* out, size_t n_per_rank) {
    run(make_op(OpKind::AllGather, all_gather_body(*s_, in, out, n_per_rank * sizeof(float))));
}
void Group::all_gather_bytes(const void* in, void* out, size_t bytes_per_rank) {
    run(make_op(OpKind::AllGather, all_gather_body(*s_, in, out, bytes_per_rank)));
}
void Group::broadcast(float* data, size_t n, int root) {
    run(make_op(OpKind::Broadcast, broadcast_body(*s_, data, n * sizeof(float), root)));
}
void Group::broadcast_bytes(void* data, size_t bytes, int root) {
    run(make_op(OpKind::Broadcast, broadcast_body(*s_, data, bytes, root)));
}

Request Group::iall_reduce_sum(float* data, size_t n) {
    return submit(make_op(OpKind::AllReduce, all_reduce_body(*s_, data, n, Sum{})));
}
Request Group::ireduce_scatter_sum(const float* in, float* out, size_t n_per_rank) {
    return submit(make_op(OpKind::ReduceScatter, reduce_scatter_body(*s_, in, out, n_per_rank)));
}
Request Group::iall_gather(const float* in, float* out, size_t n_per_rank) {
    return submit(make_op(OpKind::AllGather, all_gather_body(*s_, in, out, n_per_rank * sizeof(float))));
}
Request Group::iall_gather_bytes(const void* in, void* out, size_t bytes_per_rank) {
    return submit(make_op(OpKind::AllGather, all_gather_body(*s_, in, out, bytes_per_rank)));
}
Request Group::ibroadcast(float* data, size_t n, int root) {
    return submit(make_op(OpKind::Broadcast, broadcast_body(*s_, data, n * sizeof(float), root)));
}

void Group::barrier() {
    if (s_->size == 1) {
        run(make_op(OpKind::Barrier, [](Op&) {}));
        return;
    }
    MPI_Comm c = s_->coll;
    run(make_op(OpKind::Barrier, [c](Op&) {
        MPI_Request rq;
        SHARDLM_MPI_CHECK(MPI_Ibarrier(c, &rq));
        engine().wait_requests(&rq, 1);
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

}  // namespace

void Group::send(const void* data, size_t bytes, int dst, int tag) {
    check_rank(dst, s_->size, "destination", "send");
    check_tag(tag, "send");
    if (!s_->is_mpi()) {
        run(make_op(OpKind::SendRecv, [this, data, bytes, tag](Op& op) {
            self_send(*s_, data, bytes, tag);
            op.bytes_sent = bytes;
        }));
        return;
    }
    MPI_Comm c = s_->p2p;
    run(make_op(OpKind::SendRecv, [=](Op& op) { post_send(data, bytes, dst, tag, c, op.reqs, op.bytes_sent, true); }, true));
}

void Group::recv(void* data, size_t bytes, int src, int tag) {
    check_rank(src, s_->size, "source", "recv");
    check_tag(tag, "recv");
    if (!s_->is_mpi()) {
        run(make_op(OpKind::SendRecv, [this, data, bytes, tag](Op&) { self_recv(*s_, data, bytes, tag); }));
        return;
    }
    MPI_Comm c = s_->p2p;
    run(make_op(OpKind::SendRecv, [=](Op& op) { post_recv(data, bytes, src, tag, c, op.reqs, true); }, true));
}

Request Group::isend(const void* data, size_t bytes, int dst, int tag) {
    check_rank(dst, s_->size, "destination", "isend");
    check_tag(tag, "isend");
    if (!s_->is_mpi()) {
        return submit(make_op(OpKind::SendRecv, [this, data, bytes, tag](Op& op) {
            self_send(*s_, data, bytes, tag);
            op.bytes_sent = bytes;
        }));
    }
    MPI_Comm c = s_->p2p;
    return submit(make_op(OpKind::SendRecv, [=](Op& op) { post_send(data, bytes, dst, tag, c, op.reqs, op.bytes_sent, true); }, true));
}

Request Group::irecv(void* data, size_t bytes, int src, int tag) {
    check_rank(src, s_->size, "source", "irecv");
    check_tag(tag, "irecv");
    if (!s_->is_mpi()) {
        return submit(make_op(OpKind::SendRecv, [this, data, bytes, tag](Op&) { self_recv(*s_, data, bytes, tag); }));
    }
    MPI_Comm c = s_->p2p;
    return submit(make_op(OpKind::SendRecv, [=](Op& op) { post_recv(data, bytes, src, tag, c, op.reqs, true); }, true));
}

// ---- theory -----------------------------------------------------------------------------------

size_t Group::ring_bytes(OpKind kind, size_t bytes_total, int n) {
    SHARDLM_CHECK(n >= 1, "ring_bytes: group size ", n, " must be >= 1");
    const size_t N = size_t(n);
    switch (kind) {
    case OpKind::AllReduce: return 2 * (N - 1) * bytes_total / N;
    case OpKind::ReduceScatter:
    case OpKind::AllGather:
    case OpKind::Broadcast: return (N - 1) * bytes_total / N;
    case OpKind::SendRecv: return bytes_total;
    case OpKind::Barrier: return 0;
    }
    return 0;
}

size_t Group::ring_bytes_rank(OpKind kind, size_t count, size_t elem_bytes, int n, int rank, int root) {
    SHARDLM_CHECK(n >= 1 && rank >= 0 && rank < n, "ring_bytes_rank: rank ", rank, " of ", n);
    if (n == 1 && kind != OpKind::SendRecv) return 0;
    const size_t total = count * elem_bytes;
    switch (kind) {
    case OpKind::AllReduce: {
        const Blocks bl(count, n);
        return total - bl.len(rank) * elem_bytes + total - bl.len(mod(rank + 1, n)) * elem_bytes;
    }
    case OpKind::ReduceScatter:
    case OpKind::AllGather: return total - total / size_t(n);  // count must be a multiple of n
    case OpKind::Broadcast: return mod(rank - root, n) < n - 1 ? total : 0;
    case OpKind::SendRecv: return total;
    case OpKind::Barrier: return 0;
    }
    return 0;
}

std::string Group::stats_table() const {
    std::ostringstream os;
    os << std::left << std::setw(16) << "op" << std::right << std::setw(10) << "calls" << std::setw(16) << "bytes_sent"
       << std::setw(12) << "seconds" << std::setw(12) << "GB/s_sent" << "\n";
    auto line = [&](std::string_view name, const OpStats& o) {
        os << std::left << std::setw(16) << name << std::right << std::setw(10) << o.calls << std::setw(16) << o.bytes_sent
           << std::setw(12) << std::fixed << std::setprecision(6) << o.seconds << std::setw(12) << std::setprecision(3)
           << (o.seconds > 0 ? double(o.bytes_sent) / o.seconds / 1e9 : 0.0) << "\n";
    };
    OpStats total;
    for (int k = 0; k < kNumOpKinds; k++) {
        const OpStats& o = s_->stats.ops[size_t(k)];
        if (o.calls == 0) continue;
        line(op_name(OpKind(k)), o);
        total.calls += o.calls;
        total.bytes_sent += o.bytes_sent;
        total.seconds += o.seconds;
    }
    line("total", total);
    return os.str();
}

}  // namespace shardlm::comm
