/*
checksum.h — CRC32C of the files the trainer writes, so that a damaged one is named, never trained on.

CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected) catches every burst of up to 32 flipped
bits and all but 2^-32 of other damage. It is computed 8 bytes at a time (slicing-by-8 tables).

Two places keep a checksum:
  a model file PATH (llm.c's format, which has no room of its own): the file PATH.crc32c beside
    it, one line "crc32c HEX BYTES"; a model file without one (llm.c's) loads unchecked
  our int64-header files (a checkpoint's state, history and FP8 history): header slots 14 and 15
    hold CRC_MAGIC and the CRC32C of the whole file, slot 15 read as 0; a checkpoint that has a
    model.bin.crc32c has them in every such file

Main functions: crc32c, crc32c_file, sidecar_write, sidecar_read, sidecar_verify,
header_file_open, header_file_close (it calls header_seal), header_verify.
Tests: test/test_ops.cpp (the standard check value), test/test_cli.sh (a flipped byte in each
kind of file stops the run, naming it), test/test_fuzz.py. More: docs/formats.md.
*/
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "errors.h"

static const int64_t CRC_MAGIC = 20261127;  // header slot 14 says slot 15 holds the CRC32C

inline const uint32_t* crc32c_tables() {  // t[k][b]: the CRC of byte b followed by k zero bytes
    static uint32_t t[8][256];
    static const bool made = [] {
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = b;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            t[0][b] = c;
        }
        for (int k = 1; k < 8; k++)
            for (int b = 0; b < 256; b++) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
        return true;
    }();
    (void)made;
    return &t[0][0];
}
// The CRC32C of n more bytes, after `crc` (0 to start).
inline uint32_t crc32c(uint32_t crc, const void* data, size_t n) {
    const uint32_t* t = crc32c_tables();
    const uint8_t* p = (const uint8_t*)data;
    crc = ~crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);  // (little-endian: the first byte is the lowest)
        w ^= crc;
        crc = t[7 * 256 + (w & 0xff)] ^ t[6 * 256 + ((w >> 8) & 0xff)] ^ t[5 * 256 + ((w >> 16) & 0xff)] ^
              t[4 * 256 + ((w >> 24) & 0xff)] ^ t[3 * 256 + ((w >> 32) & 0xff)] ^ t[2 * 256 + ((w >> 40) & 0xff)] ^
              t[1 * 256 + ((w >> 48) & 0xff)] ^ t[w >> 56];
    }
    for (; n; n--) crc = (crc >> 8) ^ t[(crc ^ *p++) & 0xff];
    return ~crc;
}
// The CRC32C of a file's bytes from `from` to its end, after `crc` (0 to start); *bytes (if
// given): the file's size.
inline uint32_t crc32c_file(const std::string& path, long long from, long long* bytes = nullptr, uint32_t crc = 0) {
    FILE* f = fopen_or_die(path.c_str(), "rb");
    std::vector<char> buf(1 << 22);
    if (fseek(f, from, SEEK_SET) != 0) fatal("cannot read '%s'", path.c_str());
    long long n = from;
    for (size_t got; (got = fread(buf.data(), 1, buf.size(), f)) > 0; n += (long long)got) crc = crc32c(crc, buf.data(), got);
    if (ferror(f)) fatal("cannot read '%s': %s", path.c_str(), strerror(errno));
    fclose(f);
    if (bytes) *bytes = n;
    return crc;
}

// The checksum file of a model file: one line "crc32c HEX BYTES" for the file `hashed` (whole,
// header included), written to `out` (the caller renames it beside the model file, PATH.crc32c).
inline void sidecar_write(const std::string& hashed, const std::string& out) {
    long long bytes = 0;
    const uint32_t crc = crc32c_file(hashed, 0, &bytes);
    FILE* f = fopen_or_die(out.c_str(), "w");
    fprintf(f, "crc32c %08x %lld\n", crc, bytes);
    if (!close_synced(f)) fatal("cannot write '%s': %s", out.c_str(), strerror(errno));
}
// What PATH.crc32c says of the model file PATH: false where there is none (an llm.c file).
inline bool sidecar_read(const std::string& path, uint32_t* want, long long* want_bytes) {
    const std::string side = path + ".crc32c";
    FILE* f = fopen(side.c_str(), "r");
    if (!f) return false;
    char text[128] = "";
    const size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    unsigned crc = 0;
    long long bytes = -1;
    char again[128] = "";  // (the line as sidecar_write writes it: anything else is damage)
    if (sscanf(text, "crc32c %x %lld", &crc, &bytes) == 2) snprintf(again, sizeof again, "crc32c %08x %lld\n", crc, bytes);
    if (got == 0 || got != strlen(again) || memcmp(again, text, got) != 0)
        fatal("'%s' is damaged: not one line \"crc32c HEX BYTES\"", side.c_str());
    *want = crc, *want_bytes = bytes;
    return true;
}
// Checks the model file PATH against PATH.crc32c where there is one (else: an llm.c file, unchecked).
inline void sidecar_verify(const std::string& path) {
    const std::string side = path + ".crc32c";
    uint32_t want = 0;
    long long want_bytes = -1, bytes = 0;
    if (!sidecar_read(path, &want, &want_bytes)) return;
    const uint32_t crc = crc32c_file(path, 0, &bytes);
    if (crc != want || bytes != want_bytes)
        fatal("'%s' is damaged: its CRC32C is %08x over %lld bytes, but '%s' says %08x over %lld (if the file was replaced "
              "on purpose, delete the .crc32c)", path.c_str(), crc, bytes, side.c_str(), want, want_bytes);
}

// The CRC32C of an int64-header file: its header h (16 int64s, given) with slot 15 read as 0,
// then the rest of the file.
inline uint32_t header_file_crc(const std::string& path, const int64_t* h) {
    int64_t hz[16];
    memcpy(hz, h, sizeof hz);
    hz[15] = 0;
    return crc32c_file(path, sizeof hz, nullptr, crc32c(0, hz, sizeof hz));
}
// Our int64-header files: slot 14 gets CRC_MAGIC and slot 15 the CRC32C of the file (written
// after the rest of it).
inline void header_seal(const std::string& path) {
    int64_t h[16];
    FILE* f = fopen_or_die(path.c_str(), "r+b");
    fread_or_die(h, sizeof(int64_t), 16, f, path.c_str());
    h[14] = CRC_MAGIC;
    const int64_t seal[2] = {CRC_MAGIC, (int64_t)header_file_crc(path, h)};
    if (fseek(f, 14 * 8, SEEK_SET) != 0) fatal("cannot write '%s'", path.c_str());
    fwrite_or_die(seal, sizeof(int64_t), 2, f, path.c_str());
    if (!close_synced(f)) fatal("cannot write '%s': %s", path.c_str(), strerror(errno));
}
// Such a file is written in three parts: header_file_open (the file and its header h, 16 int64s),
// its body, then header_file_close (the file fsynced, then sealed).
inline FILE* header_file_open(const std::string& path, const int64_t* h) {
    FILE* f = fopen_or_die(path.c_str(), "wb");
    fwrite_or_die(h, sizeof(int64_t), 16, f, path.c_str());
    return f;
}
inline void header_file_close(FILE* f, const std::string& path) {
    if (!close_synced(f)) fatal("cannot write '%s'", path.c_str());
    header_seal(path);
}
// Checks such a file given its header h (read already). required: its checkpoint has checksums
// (a model.bin.crc32c), so a header without the seal is damage too; else (a checkpoint from
// before checksums) such a header passes.
inline void header_verify(const std::string& path, const int64_t* h, bool required) {
    if (h[14] != CRC_MAGIC) {
        if (required) fatal("'%s' is damaged: its header has no checksum (slot 14 is %lld), though its checkpoint's files have them",
                            path.c_str(), (long long)h[14]);
        return;
    }
    const uint32_t crc = header_file_crc(path, h);
    if ((int64_t)crc != h[15])
        fatal("'%s' is damaged: its CRC32C is %08x, its header says %08llx", path.c_str(), crc, (unsigned long long)h[15]);
}
