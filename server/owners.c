/*
 * STATE_DIR/owners (see owners.h). The file is small — a line per reference, hundreds at most —
 * so it is rewritten whole rather than edited.
 */
#include "server/owners.h"
#include "common/log.h"
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void kd_owners_path(const kd_server_t *server, char *buf, size_t cap, int tmp)
{
    snprintf(buf, cap, "%s/%s", kd_state_dir(server->state), tmp ? ".owners.tmp" : "owners");
}

int kd_owners_save(kd_server_t *server, kd_err_t *err)
{
    if (server->state == NULL)
        return KD_OK;
    kd_matrix_meta_t *list;
    size_t count;
    if (kd_store_list(server->store, &list, &count) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory listing owners");
    char path[KD_PATH_MAX + 16], tmp[KD_PATH_MAX + 16];
    kd_owners_path(server, path, sizeof(path), 0);
    kd_owners_path(server, tmp, sizeof(tmp), 1);
    FILE *f = fopen(tmp, "we");
    if (f == NULL) {
        free(list);
        return kd_err_set(err, KD_EIO, "cannot create %s: %s", tmp, strerror(errno));
    }
    fprintf(f, "# krylovd owners: <id> <user> <pinned>\n");
    for (size_t i = 0; i < count; i++)
        for (int o = 0; o < list[i].nowners; o++)
            fprintf(f, "%s %s %d\n", list[i].hex, list[i].owners[o].name,
                    list[i].owners[o].pinned != 0);
    free(list);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    int saved = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        if (!bad)
            saved = errno;
        unlink(tmp);
        return kd_err_set(err, KD_EIO, "cannot write %s: %s", path, strerror(saved));
    }
    int dfd = open(kd_state_dir(server->state), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) != 0) {
        saved = errno;
        if (dfd >= 0)
            close(dfd);
        return kd_err_set(err, KD_EIO, "cannot fsync %s: %s", kd_state_dir(server->state),
                          strerror(saved));
    }
    close(dfd);
    return KD_OK;
}

/* One line "<hex> <name> <0|1>" into its matrix's references; 0, or -1 when it is malformed. */
static int kd_owners_line(kd_server_t *server, char *line, kd_err_t *err)
{
    char hex[KD_ID_HEX_LEN + 2], name[KD_AUTH_NAME_MAX + 1], extra[2];
    int pinned = -1;
    if (sscanf(line, "%33s %64s %d %1s", hex, name, &pinned, extra) != 3 ||
        (pinned != 0 && pinned != 1) || strlen(name) >= KD_AUTH_NAME_MAX)
        return -1;
    uint8_t id[16];
    if (kd_id_from_hex(hex, strlen(hex), id) != 0)
        return -1;
    kd_store_entry_t *entry = kd_store_find(server->store, id);
    if (entry == NULL)
        return 0; /* its file went (dropped, evicted from disk, moved aside) */
    if (kd_store_add_owner(server->store, entry, name, pinned, err) != KD_OK)
        KD_WARN("owners", "%s", err->message);
    return 0;
}

int kd_owners_load(kd_server_t *server, kd_err_t *err)
{
    if (server->state == NULL)
        return KD_OK;
    char path[KD_PATH_MAX + 16];
    kd_owners_path(server, path, sizeof(path), 0);
    FILE *f = fopen(path, "re");
    if (f == NULL && errno != ENOENT)
        return kd_err_set(err, KD_EIO, "cannot read %s: %s", path, strerror(errno));
    size_t lines = 0, bad = 0;
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof(line), f) != NULL) {
            lines++;
            if (line[0] == '#' || line[0] == '\n')
                continue;
            if (kd_owners_line(server, line, err) != 0) {
                bad++;
                KD_WARN("owners", "%s:%zu: not <id> <user> <0|1>; skipped", path, lines);
            }
        }
        fclose(f);
    }
    kd_matrix_meta_t *list;
    size_t count, orphans = 0;
    if (kd_store_list(server->store, &list, &count) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory listing owners");
    for (size_t i = 0; i < count; i++) {
        if (list[i].nowners > 0)
            continue;
        kd_store_entry_t *entry = kd_store_find(server->store, list[i].id);
        if (entry != NULL &&
            kd_store_add_owner(server->store, entry, KD_ANONYMOUS, list[i].pinned, err) == KD_OK)
            orphans++;
    }
    free(list);
    KD_INFO("owners", "%s: %zu lines, %zu skipped; %zu matrices with no owner given to %s", path,
            lines, bad, orphans, KD_ANONYMOUS);
    return KD_OK;
}
