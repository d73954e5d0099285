/*
host_memory.h — how much memory this process may still take on its host.

The memory plan (planner.h) needs what the host can still give: /proc/meminfo's MemAvailable,
or the memory cgroup's limit less its use where that is tighter (a container's limit, a Slurm
job's --mem). cgroup v1 and v2 are both read, the tightest of the cgroup and its parents.

Main functions: host_available_bytes, cgroup_room_bytes.

Tests: test/test_ops.cpp (made-up cgroup trees, v1 and v2), test/test_cli.sh (the host's
memory in the plan). More: docs/training.md.
(Included by common.h, after the Ctx it needs.)
*/
#pragma once
#include <cstdio>
#include <cstring>
#include <string>

// A number from a cgroup file: its first one (memory.max, memory.current), or with key the one
// on the line "key N" (memory.stat). -1 where the file or the key is missing, or for "max".
inline double cgroup_number(const std::string& path, const char* key = nullptr) {
    FILE* f = fopen(path.c_str(), "r");
    if (!f) return -1;
    char line[256], name[128];
    double v = -1, x;
    while (fgets(line, sizeof line, f)) {
        if (!key) { if (sscanf(line, "%lf", &x) == 1) v = x; break; }
        if (sscanf(line, "%127s %lf", name, &x) == 2 && strcmp(name, key) == 0) { v = x; break; }
    }
    fclose(f);
    return v;
}

// What this process's memory cgroup (a container's limit, a Slurm job's --mem) still lets it
// allocate before the kernel kills it: the limit less what the cgroup holds, not counting the
// file cache the kernel drops first (inactive_file); the tightest of the cgroup and its parents.
// -1 where no limit applies. root: where cgroupfs is mounted; self: the text of /proc/self/cgroup
// (arguments, so that test_ops runs it on made-up trees).
//   cgroup v2: the line "0::PATH"; ROOT/PATH and each parent: memory.max ("max": none),
//              memory.current, memory.stat's inactive_file.
//   cgroup v1: the line "N:…memory…:PATH"; ROOT/memory/PATH (or, in a container that sees only
//              its own, ROOT/memory): memory.limit_in_bytes (~2^63: none) and memory.stat's
//              hierarchical_memory_limit (the parents'), memory.usage_in_bytes, total_inactive_file.
inline double cgroup_room_bytes(const std::string& root, const std::string& self) {
    std::string v2_path, v1_path;
    bool v1 = false;
    for (size_t pos = 0; pos < self.size();) {
        size_t end = self.find('\n', pos);
        if (end == std::string::npos) end = self.size();
        const std::string line = self.substr(pos, end - pos);
        pos = end + 1;
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (line.compare(0, a, "0") == 0 && controllers.empty()) v2_path = path;
        else if (("," + controllers + ",").find(",memory,") != std::string::npos) { v1 = true; v1_path = path; }
    }
    double room = -1;
    auto tighten = [&](double limit, double used, double cache) {
        if (limit < 0 || limit >= 1e18 || used < 0) return;  // no limit here
        const double r = std::max(0.0, limit - (used - std::max(cache, 0.0)));
        room = room < 0 ? r : std::min(room, r);
    };
    if (v1) {
        std::string dir = root + "/memory" + (v1_path == "/" ? "" : v1_path);
        if (cgroup_number(dir + "/memory.limit_in_bytes") < 0) dir = root + "/memory";
        double limit = cgroup_number(dir + "/memory.limit_in_bytes");
        const double parents = cgroup_number(dir + "/memory.stat", "hierarchical_memory_limit");
        if (parents >= 0 && (limit < 0 || parents < limit)) limit = parents;
        tighten(limit, cgroup_number(dir + "/memory.usage_in_bytes"), cgroup_number(dir + "/memory.stat", "total_inactive_file"));
    } else if (!v2_path.empty()) {
        for (std::string p = v2_path;;) {  // the cgroup, then each parent up to the mount's root
            const std::string dir = root + (p == "/" ? "" : p);
            tighten(cgroup_number(dir + "/memory.max"), cgroup_number(dir + "/memory.current"),
                    cgroup_number(dir + "/memory.stat", "inactive_file"));
            if (p == "/" || p.empty()) break;
            p = p.substr(0, p.rfind('/'));
            if (p.empty()) p = "/";
        }
    }
    return room;
}

// The host memory this process can still be given: /proc/meminfo's MemAvailable (free memory
// plus the page cache Linux can drop), or less where its memory cgroup allows less
// (*by_cgroup then says so); 0 where neither is known. LLMC_HOST_MEMORY=<bytes> in the
// environment caps it (plan as if no more were available: a node shared with other jobs, or a
// test that needs the same number in two runs, which MemAvailable, moving by the second, is not).
inline double host_available_bytes(bool* by_cgroup = nullptr) {
    double cap = -1;
    if (const char* env = getenv("LLMC_HOST_MEMORY")) {
        char* end = nullptr;
        cap = strtod(env, &end);
        if (end == env || *end != 0 || cap <= 0) usage_error("LLMC_HOST_MEMORY=%s: expected a number of bytes greater than 0", env);
    }
    double kib = 0;
    char line[256];
    if (FILE* f = fopen("/proc/meminfo", "r")) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
        fclose(f);
    }
    std::string self;
    if (FILE* f = fopen("/proc/self/cgroup", "r")) {
        while (fgets(line, sizeof line, f)) self += line;
        fclose(f);
    }
    const double cgroup = cgroup_room_bytes("/sys/fs/cgroup", self), meminfo = kib * 1024;
    const bool tighter = cgroup >= 0 && (meminfo <= 0 || cgroup < meminfo);
    if (by_cgroup) *by_cgroup = tighter;
    const double room = tighter ? cgroup : meminfo;
    return cap > 0 && (room <= 0 || cap < room) ? cap : room;
}
