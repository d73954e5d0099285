/*
errors.h — one-line errors, checked file I/O, the clock and sizes for people.

Every error is one line that says what and where, then an exit: usage_error for a bad command
line (exit 2; only rank 0 prints, and every rank leaves together; a rank left alone ends after
10 s), fatal and CHECK for bad data or I/O (exit 1; the rank prints, prefixed with its number),
run_failed for a run that diverged (exit 3; as usage_error). print0: rank 0 alone prints.
fopen_or_die, fread_or_die, fwrite_or_die: every file operation checked, the file named.

Main functions: usage_error, fatal, run_failed, CHECK, print0, fopen_or_die, close_synced,
sync_dir, now_seconds, ceil_div, format_bytes.

Tests: test/test_cli.sh (the messages and exit codes), test/test_dp.sh (a rank left alone),
test/test_ops.cpp. More: docs/backends.md.
*/
#pragma once
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <string>
#include <thread>
#include <fcntl.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// errors

inline int g_rank = 0, g_world = 1;        // this process in the world (set by comm.h)
inline void (*g_leave_collectively)() = nullptr;  // comm.h: finalize MPI when all ranks exit

// A collective error is meant to be met by every rank at once: rank 0 prints it, and all leave
// MPI together. A rank that meets it alone (a file missing on its node only) would wait in that
// leave forever, and the others in their next collective. So after 10 s such a rank prints its
// line, if rank 0 did not, and ends without MPI; the launcher then ends the others.
inline void leave_alone_after(double seconds, std::string line, int code) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    if (!line.empty()) fprintf(stderr, "%s\n", line.c_str());
    _exit(code);
}
[[noreturn]] inline void die_with(int code, bool collective, const char* fmt, va_list ap) {
    fflush(stdout);
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    const std::string rank = "[rank " + std::to_string(g_rank) + "] ";
    if (!collective || g_rank == 0) fprintf(stderr, "%serror: %s\n", g_world > 1 && !collective ? rank.c_str() : "", msg);
    if (collective && g_leave_collectively) {
        const std::string alone = g_rank == 0 ? "" : rank + "error: " + msg + " (the other ranks did not stop with it within 10 s)";
        std::thread(leave_alone_after, 10.0, alone, code).detach();
        g_leave_collectively();
    }
    exit(code);
}
[[noreturn]] inline void usage_error(const char* fmt, ...) {
    va_list ap; va_start(ap, fmt); die_with(2, true, fmt, ap);
}
[[noreturn]] inline void fatal(const char* fmt, ...) {
    va_list ap; va_start(ap, fmt); die_with(1, false, fmt, ap);
}
// The training itself failed: it diverged or stopped learning (exit 3). Every rank decides it
// alike, from the reduced loss and norm, so rank 0 alone prints. A restart from the last
// checkpoint would fail the same way, bit for bit: scripts/run_until_done.sh does not retry it.
[[noreturn]] inline void run_failed(const char* fmt, ...) {
    va_list ap; va_start(ap, fmt); die_with(3, true, fmt, ap);
}
inline void print0(const char* fmt, ...) {
    if (g_rank != 0) return;
    va_list ap; va_start(ap, fmt); vprintf(fmt, ap); va_end(ap);
}
#define CHECK(cond, ...) do { if (!(cond)) fatal(__VA_ARGS__); } while (0)

// ----------------------------------------------------------------------------
// files: every open/read/write checked, with the file name in the message

// flag: the option that named the file, said first where given ("--tokenizer: cannot open ...").
inline FILE* fopen_or_die(const char* path, const char* mode, const char* flag = nullptr) {
    FILE* f = fopen(path, mode);
    const char* use = mode[0] == 'r' && !strchr(mode, '+') ? "reading" : "writing";
    if (!f) fatal("%s%scannot open '%s' for %s: %s", flag ? flag : "", flag ? ": " : "", path, use, strerror(errno));
    return f;
}
inline void fread_or_die(void* dst, size_t size, size_t n, FILE* f, const char* path) {
    size_t got = fread(dst, size, n, f);
    if (got != n) fatal("'%s' is truncated: expected %zu more bytes, got %zu", path, size * n, size * got);
}
inline void fwrite_or_die(const void* src, size_t size, size_t n, FILE* f, const char* path) {
    if (fwrite(src, size, n, f) != n) fatal("cannot write '%s': %s", path, strerror(errno));
}
// A written file on the disk before anything names it complete: flushed, fsynced, closed. False
// where any of them failed (the caller names the file).
inline bool close_synced(FILE* f) {
    const bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    return fclose(f) == 0 && ok;
}
// A directory's entries (a file created or renamed in it) on the disk.
inline void sync_dir(const std::string& dir) {
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) fatal("cannot sync the directory '%s': %s", dir.c_str(), strerror(errno));
    close(fd);
}
inline long long file_size_or_die(const char* path) {
    FILE* f = fopen_or_die(path, "rb");
    fseek(f, 0, SEEK_END);
    long long n = ftell(f);
    fclose(f);
    return n;
}

// ----------------------------------------------------------------------------
// time

inline double now_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// A size for people: "1.50 GiB", "26.6 MiB".
inline std::string format_bytes(double bytes) {
    char s[32];
    if (bytes >= 1073741824.0) snprintf(s, sizeof s, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(s, sizeof s, "%.1f MiB", bytes / 1048576.0);
    return s;
}
