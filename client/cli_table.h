/*
 * Aligned text tables for the CLI (`krylov list`, `krylov status`): add cells row by row, then
 * print with each column as wide as its widest cell, numbers right-aligned, two spaces between
 * columns. The header row is underlined with dashes.
 */
#ifndef KD_CLIENT_CLI_TABLE_H
#define KD_CLIENT_CLI_TABLE_H

#include <stdio.h>

#define KD_TABLE_MAX_COLUMNS 16

typedef struct kd_table {
    int columns;
    int right[KD_TABLE_MAX_COLUMNS]; /* right-align this column */
    char **cells;                    /* rows * columns strings, row-major */
    int rows, cap_rows;
    int cell; /* next cell of the row being added */
    int failed;
} kd_table_t;

/* headers: `columns` names; a name starting with '>' is right-aligned (the '>' is not shown). */
void kd_table_init(kd_table_t *t, int columns, const char *const *headers);
void kd_table_cell(kd_table_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print and free. Returns -1 (after printing nothing) if memory ran out. */
int kd_table_print(kd_table_t *t, FILE *out);
void kd_table_free(kd_table_t *t);

#endif
