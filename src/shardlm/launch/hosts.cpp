#include "shardlm/launch/hosts.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

namespace shardlm::launch {

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

bool is_ip(const std::string& s) {
    unsigned char buf[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

std::string first_label(const std::string& s) { return is_ip(s) ? s : s.substr(0, s.find('.')); }

std::string address_text(const struct sockaddr* sa) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
    else if (sa->sa_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
    return buf;
}

// The addresses a name resolves to (none when it does not: a name only mpirun's nodes know).
std::set<std::string> addresses(const std::string& name) {
    static std::map<std::string, std::set<std::string>> cache;  // (a lookup may ask a DNS server: once per name)
    if (auto it = cache.find(name); it != cache.end()) return it->second;
    std::set<std::string>& out = cache[name];
    struct addrinfo hints = {};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    struct addrinfo* res = nullptr;
    if (getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0) return out;
    for (struct addrinfo* p = res; p; p = p->ai_next) out.insert(address_text(p->ai_addr));
    freeaddrinfo(res);
    return out;
}

bool loopback(const std::string& addr) { return addr.rfind("127.", 0) == 0 || addr == "::1"; }

// This machine: its host name's first label, and its interfaces' addresses.
bool is_this_machine(const std::string& name) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    if (lower(first_label(name)) == lower(first_label(host)) || lower(name) == "localhost") return true;
    std::set<std::string> mine;
    struct ifaddrs* ifs = nullptr;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs* i = ifs; i; i = i->ifa_next)
            if (i->ifa_addr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6))
                mine.insert(address_text(i->ifa_addr));
        freeifaddrs(ifs);
    }
    for (const std::string& a : addresses(name))
        if (loopback(a) || mine.count(a)) return true;
    return false;
}

}  // namespace

bool same_host(const std::string& a, const std::string& b) {
    if (lower(a) == lower(b) || lower(first_label(a)) == lower(first_label(b))) return true;
    if (is_this_machine(a) && is_this_machine(b)) return true;
    const std::set<std::string> x = addresses(a), y = addresses(b);
    return std::any_of(x.begin(), x.end(), [&](const std::string& s) { return y.count(s) > 0 && !loopback(s); });
}

}  // namespace shardlm::launch
