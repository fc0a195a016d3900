/*
 * STATE_DIR/owners (see owners.h). The file is small — a line per reference, hundreds at most —
 * so it is rewritten whole rather than edited.
 */
#include "server/store/owners.h"
#include "common/log.h"
#include "server/server.h"
#include "server/store/state_io.h"

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

/* Log a failed call with its path and errno; the message a remote client may read (a pin or a
 * drop that failed to record) names neither. A full file system is KD_ESTORAGE. */
static int kd_owners_fail(kd_err_t *err, int saved, const char *call, const char *path)
{
    KD_ERROR("owners", "saving the owners: %s path=%s: %s", call, path, strerror(saved));
    if (saved == ENOSPC || saved == EDQUOT)
        return kd_err_set(err, KD_ESTORAGE,
                          "recording who holds which matrix: the server's storage is full; "
                          "nothing was changed: try again once space is freed");
    return kd_err_set(err, KD_EIO,
                      "recording who holds which matrix: a file-system error in the server's "
                      "state directory (the server's log has the details)");
}

int kd_owners_save(kd_server_t *server, kd_err_t *err)
{
    if (server->state == NULL)
        return KD_OK;
    kd_matrix_meta_t *list;
    size_t count;
    if (kd_store_list(server->store, &list, &count) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory listing owners");
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL) {
        free(list);
        return kd_err_set(err, KD_ENOMEM, "out of host memory listing owners");
    }
    fprintf(mem, "# krylovd owners: <id> <user> <pinned> [<the user's name for it, in hex>]\n");
    for (size_t i = 0; i < count; i++)
        for (int o = 0; o < list[i].nowners; o++) {
            const kd_owner_t *own = &list[i].owners[o];
            fprintf(mem, "%s %s %d", list[i].hex, own->name, own->pinned != 0);
            if (own->label[0] != '\0')
                fputc(' ', mem);
            for (const char *c = own->label; *c != '\0'; c++)
                fprintf(mem, "%02x", (unsigned char)*c);
            fputc('\n', mem);
        }
    free(list);
    if (fclose(mem) != 0) {
        free(text);
        return kd_err_set(err, KD_ENOMEM, "out of host memory listing owners");
    }
    char path[KD_PATH_MAX + 16], tmp[KD_PATH_MAX + 16];
    kd_owners_path(server, path, sizeof(path), 0);
    kd_owners_path(server, tmp, sizeof(tmp), 1);
    int fd = kd_state_io_create(tmp);
    if (fd < 0) {
        int saved = errno;
        free(text);
        return kd_owners_fail(err, saved, "create", tmp);
    }
    const char *call = NULL;
    if (kd_state_io_write(fd, &(struct iovec){text, len}, 1) != 0)
        call = "write";
    else if (kd_state_io_fsync(fd) != 0)
        call = "fsync";
    int saved = errno;
    free(text);
    if (close(fd) != 0 && call == NULL) {
        call = "close";
        saved = errno;
    }
    if (call == NULL && kd_state_io_rename(tmp, path) != 0) {
        call = "rename";
        saved = errno;
    }
    if (call != NULL) {
        kd_state_io_unlink(tmp);
        return kd_owners_fail(err, saved, call, tmp);
    }
    if (kd_state_io_fsync_dir(kd_state_dir(server->state)) != 0) /* the new list is in place */
        KD_WARN("owners", "fsync of the directory path=%s: %s", kd_state_dir(server->state),
                strerror(errno));
    return KD_OK;
}

/* The label of an owners line: hex pairs into out (KD_NAME_MAX bytes); 0, or -1. */
static int kd_owners_label(const char *hex, char *out)
{
    const size_t n = strlen(hex);
    if (n % 2 != 0 || n / 2 >= KD_NAME_MAX)
        return -1;
    for (size_t i = 0; i < n / 2; i++) {
        unsigned byte;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1 || byte == 0)
            return -1;
        out[i] = (char)byte;
    }
    out[n / 2] = '\0';
    return 0;
}

/* One line "<hex> <name> <0|1> [<label hex>]" into its matrix's references; 0, or -1 when it is
 * malformed. */
static int kd_owners_line(kd_server_t *server, char *line, kd_err_t *err)
{
    char hex[KD_ID_HEX_LEN + 2], name[KD_AUTH_NAME_MAX + 1], labelhex[2 * KD_NAME_MAX + 1];
    char label[KD_NAME_MAX] = "", extra[2];
    int pinned = -1;
    labelhex[0] = '\0';
    const int got = sscanf(line, "%33s %64s %d %256s %1s", hex, name, &pinned, labelhex, extra);
    if ((got != 3 && got != 4) || (pinned != 0 && pinned != 1) ||
        strlen(name) >= KD_AUTH_NAME_MAX || kd_owners_label(labelhex, label) != 0)
        return -1;
    uint8_t id[16];
    if (kd_id_from_hex(hex, strlen(hex), id) != 0)
        return -1;
    kd_store_entry_t *entry = kd_store_find(server->store, id);
    if (entry == NULL)
        return 0; /* its file went (dropped, evicted from disk, moved aside) */
    if (kd_store_add_owner(server->store, entry, name, pinned, err) != KD_OK)
        KD_WARN("owners", "%s", err->message);
    else
        kd_store_set_owner_label(server->store, entry, name, label);
    return 0;
}

int kd_owners_load(kd_server_t *server, kd_err_t *err)
{
    if (server->state == NULL)
        return KD_OK;
    char path[KD_PATH_MAX + 16], tmp[KD_PATH_MAX + 16];
    kd_owners_path(server, path, sizeof(path), 0);
    kd_owners_path(server, tmp, sizeof(tmp), 1);
    if (kd_state_io_unlink(tmp) == 0) /* a rewrite a crash interrupted: the old list stands */
        KD_WARN("owners", "removed an interrupted write path=%s", tmp);
    FILE *f = fopen(path, "re");
    if (f == NULL && errno != ENOENT)
        return kd_err_set(err, KD_EIO, "cannot read %s: %s", path, strerror(errno));
    size_t lines = 0, bad = 0;
    if (f != NULL) {
        char line[512];
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
