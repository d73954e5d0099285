/*
rand.h — a small, explicit, reproducible random number generator.

Why our own: training must be bit-reproducible across machines, compilers and runs, and the
checkpoint must be able to store the generator's whole state (one uint64). std::mt19937 plus
std::normal_distribution is not specified bit-for-bit across standard libraries.

The generator is xorshift64* (Vigna 2016); seeds are mixed with splitmix64 so nearby seeds give
unrelated streams. Normals use Box-Muller. Each parameter tensor gets its own stream,
seeded from (seed, tensor id), so initialization does not depend on how the model is laid out
over ranks.

Test: test/test_ops.cpp checks the mean/variance of rand_normal and that a state round-trips.
*/
#pragma once
#include <cmath>
#include <cstdint>

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed = 1337, uint64_t stream = 0) {
        state = splitmix64(seed ^ splitmix64(stream));
        if (state == 0) state = 0x2545F4914F6CDD1Dull;
    }
    uint64_t next_u64() {
        state ^= state >> 12; state ^= state << 25; state ^= state >> 27;
        return state * 0x2545F4914F6CDD1Dull;
    }
    // uniform in [0, 1) with 24 random bits (exactly representable in fp32)
    float uniform() { return (float)(next_u64() >> 40) / 16777216.0f; }
    // standard normal, Box-Muller (one value per call; simple beats fast here)
    float normal() {
        double u1 = ((next_u64() >> 11) + 1.0) / 9007199254740993.0;  // (0, 1]
        double u2 = (next_u64() >> 11) / 9007199254740992.0;          // [0, 1)
        return (float)(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
    }
    uint64_t below(uint64_t n) { return next_u64() % n; }  // modulo bias < n/2^64: negligible
};
