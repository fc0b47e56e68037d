/* The one pseudo-random generator: splitmix64. A 64-bit state advances by a fixed odd
 * constant and each output is a mix of the new state, so a seed gives the same numbers
 * on every machine (tests and resumed runs depend on it), and the i-th output can be had
 * without walking the stream (noise that is a pure function of its index).
 *
 * Inline: initialisation draws one number per weight. */
#ifndef AC_UTIL_RNG_H
#define AC_UTIL_RNG_H

#include <stdint.h>

#define AC_RNG_GAMMA 0x9e3779b97f4a7c15ULL /* the state's step: 2^64 / golden ratio, odd */

/* splitmix64's output function: a bijective mix of the state. */
static inline uint64_t ac_rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Advances *state and returns the next output. */
static inline uint64_t ac_rng_next(uint64_t *state) { return ac_rng_mix(*state += AC_RNG_GAMMA); }

/* Output `index` (0 first) of the stream seeded with `seed`: what ac_rng_next returns on
 * its index + 1-th call from state `seed`. */
static inline uint64_t ac_rng_at(uint64_t seed, uint64_t index)
{
    return ac_rng_mix(seed + (index + 1) * AC_RNG_GAMMA);
}

/* A 64-bit hash of x: the first output of the stream seeded with x. */
static inline uint64_t ac_rng_hash(uint64_t x) { return ac_rng_at(x, 0); }

/* Uniform integer in [0, n) (0 when n <= 0). */
static inline int ac_rng_below(uint64_t *state, int n)
{
    return n > 0 ? (int)(ac_rng_next(state) % (uint64_t)n) : 0;
}

#endif
