/*
 * What a reply shows of a matrix to each user (server/store/store.c, kd_meta_view) without a
 * daemon: an admin (KD_META_ALL) sees the totals; a user among tenants (KD_META_OWN) its own uses,
 * name and pin, and none of the upload's timings, of other users' preconditioners or of their puts
 * with like, unless the copy is its own (--tenant-dedupe off); and the id of a user's own copy
 * (kd_id_mix_tenant) is one of its own.
 */
#include "kd_test.h"
#include "server/store/store.h"

#include <string.h>

/* A matrix alice uploaded and used 9 times, that carol holds too (used once). */
static void shared_meta(kd_matrix_meta_t *m)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "alice's secret");
    m->uses = 10;
    m->device_bytes = 5000; /* with alice's preconditioner */
    m->alone_bytes = 3000;
    m->ncandidates = 1;
    m->candidates[0].time_ms = 0.25;
    snprintf(m->reorder_reason, sizeof(m->reorder_reason),
             "rcm: 0.0675 ms (in a solve 0.0335) against 0.0469, pays back in 22803 iterations");
    m->has_pattern = 1;
    m->has_like = 1;
    m->preconds_refreshed = 4;
    m->nowners = 2;
    snprintf(m->owners[0].name, sizeof(m->owners[0].name), "alice");
    snprintf(m->owners[0].label, sizeof(m->owners[0].label), "alice's secret");
    m->owners[0].uses = 9;
    m->owners[0].pinned = 1;
    snprintf(m->owners[1].name, sizeof(m->owners[1].name), "carol");
    snprintf(m->owners[1].label, sizeof(m->owners[1].label), "carol's");
    m->owners[1].uses = 1;
    m->pinned = 1;
}

static void test_admin_sees_totals(void)
{
    kd_matrix_meta_t m;
    shared_meta(&m);
    kd_meta_view(&m, "root", KD_META_ALL);
    CHECK_EQ_INT((int)m.uses, 10);
    CHECK_EQ_INT((int)m.device_bytes, 5000);
    CHECK_EQ_INT(m.hide_selection, 0);
    CHECK_EQ_INT(m.has_pattern, 1);
    CHECK_EQ_INT(m.pinned, 1); /* holds no reference: whether anyone pinned it */
    CHECK(strcmp(m.name, "alice's secret") == 0);
    CHECK_STR_CONTAINS(m.reorder_reason, "0.0675 ms");
}

static void test_user_sees_its_own(void)
{
    kd_matrix_meta_t m;
    shared_meta(&m);
    kd_meta_view(&m, "carol", KD_META_OWN);
    CHECK_EQ_INT((int)m.uses, 1);
    CHECK_EQ_INT(m.pinned, 0);
    CHECK(strcmp(m.name, "carol's") == 0);
    CHECK_EQ_INT((int)m.device_bytes, 3000);
    CHECK_EQ_INT(m.hide_selection, 1);
    CHECK_EQ_INT(m.has_pattern, 0);
    CHECK_EQ_INT(m.has_like, 0);
    CHECK(strcmp(m.reorder_reason, "rcm: timed at upload") == 0);
    shared_meta(&m); /* a reason without timings stays */
    snprintf(m.reorder_reason, sizeof(m.reorder_reason), "auto: too small to pay back");
    kd_meta_view(&m, "alice", KD_META_OWN);
    CHECK(strcmp(m.reorder_reason, "auto: too small to pay back") == 0);
    CHECK_EQ_INT((int)m.uses, 9);
    CHECK_EQ_INT(m.pinned, 1);
}

static void test_own_copy_shows_its_selection(void)
{
    kd_matrix_meta_t m;
    shared_meta(&m);
    snprintf(m.tenant, sizeof(m.tenant), "carol");
    kd_meta_view(&m, "carol", KD_META_OWN);
    CHECK_EQ_INT((int)m.uses, 1);
    CHECK_EQ_INT(m.hide_selection, 0);
    CHECK_EQ_INT(m.has_pattern, 1);
    CHECK_EQ_INT((int)m.device_bytes, 5000);
    CHECK_STR_CONTAINS(m.reorder_reason, "0.0675 ms");
    shared_meta(&m); /* a copy made for alice, shared to carol by an admin: alice's selection */
    snprintf(m.tenant, sizeof(m.tenant), "alice");
    kd_meta_view(&m, "carol", KD_META_OWN);
    CHECK_EQ_INT(m.hide_selection, 1);
}

static void test_tenant_ids(void)
{
    uint8_t content[16], alice[16], carol[16], again[16];
    for (int i = 0; i < 16; i++)
        content[i] = (uint8_t)(i * 17 + 3);
    memcpy(alice, content, 16);
    memcpy(carol, content, 16);
    memcpy(again, content, 16);
    kd_id_mix_tenant(alice, "alice");
    kd_id_mix_tenant(carol, "carol");
    kd_id_mix_tenant(again, "alice");
    CHECK(memcmp(alice, content, 16) != 0);
    CHECK(memcmp(alice, carol, 16) != 0);
    CHECK(memcmp(alice, again, 16) == 0);
}

int main(void)
{
    kd_test_seed();
    RUN(test_admin_sees_totals);
    RUN(test_user_sees_its_own);
    RUN(test_own_copy_shows_its_selection);
    RUN(test_tenant_ids);
    return kd_test_finish();
}
