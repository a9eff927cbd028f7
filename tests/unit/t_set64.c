/* base/set64.h: membership, duplicates, growth and clearing. */
#include "error.h"
#include "set64.h"
#include "tap.h"

int main(void)
{
    pt_set64 s = {0};
    ok(!pt_set64_has(&s, 7), "an empty set has nothing");
    is(pt_set64_add(&s, 7), 1, "a new key is added");
    is(pt_set64_add(&s, 7), 0, "... and not twice");
    /* Keys that share their low bits probe past each other, across several doublings. */
    int added = 0, dup = 0;
    for (uint64_t k = 1; k <= 5000; k++)
        added += pt_set64_add(&s, k << 20) == 1;
    for (uint64_t k = 1; k <= 5000; k++)
        dup += pt_set64_add(&s, k << 20) == 0;
    is(added, 5000, "5,000 keys with equal low bits are added");
    is(dup, 5000, "... and each is found again");
    is((long)s.n, 5001, "the count");
    ok((s.n + 0) * 2 <= s.mask + 1, "the table stays at most half full (%zu slots)", s.mask + 1);
    ok(!pt_set64_has(&s, 5001ull << 20) && !pt_set64_has(&s, 8), "absent keys are absent");
    size_t slots = s.mask + 1;
    pt_set64_clear(&s);
    ok(s.n == 0 && !pt_set64_has(&s, 7) && !pt_set64_has(&s, 1ull << 20),
       "clear empties the set");
    is((long)(s.mask + 1), (long)slots, "... and keeps its memory");
    is(pt_set64_add(&s, 7), 1, "a cleared set takes keys again");
    pt_set64_free(&s);
    ok(s.slot == NULL && s.n == 0, "free leaves an empty set");
    return done_testing();
}
