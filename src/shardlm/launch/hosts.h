// launch/hosts.h: whether two names of a node are the same node.
//
// mpirun names a node as that node calls itself ("node7"), while a hostfile may name it "localhost",
// an IP address or a full domain name ("node7.cluster.example"). shrink_hostfile (supervisor.h) must
// take a lost rank's slot from the line that names its node, however it is spelt.
#pragma once
#include <string>

namespace shardlm::launch {

// True when a and b name one node: the same name (ignoring case), the same first label of a domain
// name ("node7" and "node7.cluster.example"), both this machine (its host name, localhost, a loopback
// address or one of its interfaces' addresses), or names that resolve to a common address.
bool same_host(const std::string& a, const std::string& b);

}  // namespace shardlm::launch
