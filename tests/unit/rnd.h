/* Random numbers for tests that must give the same answers on every run: xorshift64*. */
#ifndef PT_TEST_RND_H
#define PT_TEST_RND_H

#include <stdint.h>

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t rnd64(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 0x2545f4914f6cdd1dull;
}

#endif
