/*
 * The `auto` map of a solve's reply (docs/PROTOCOL.md, "Method auto"): what method "auto" tried
 * (server/handlers/auto.c) and which attempt converged. Apart from auto.c because both answers
 * it can end with, a Krylov solve's (solve_job.c) and a direct one's (direct.c), write it.
 */
#include "server/handlers/handlers.h"

#include <stdio.h>
#include <string.h>

void kd_auto_write_trail(kd_writer_t *w, const kd_auto_trail_t *trail)
{
    const kd_auto_step_t *last = trail->count > 0 ? &trail->steps[trail->count - 1] : NULL;
    char chosen[40] = "";
    if (last != NULL && last->status != NULL && strcmp(last->status, "converged") == 0)
        snprintf(chosen, sizeof(chosen), "%s%s%s", last->method,
                 strcmp(last->preconditioner, "none") != 0 ? "+" : "",
                 strcmp(last->preconditioner, "none") != 0 ? last->preconditioner : "");
    kd_w_str(w, "auto");
    kd_w_map(w, 2);
    kd_w_kv_str(w, "chosen", chosen);
    kd_w_str(w, "tried");
    kd_w_array(w, (uint32_t)trail->count);
    for (int i = 0; i < trail->count; i++) {
        const kd_auto_step_t *s = &trail->steps[i];
        kd_w_map(w, 7);
        kd_w_kv_str(w, "method", s->method);
        kd_w_kv_str(w, "preconditioner", s->preconditioner);
        kd_w_kv_str(w, "status", s->status != NULL ? s->status : "");
        kd_w_kv_int(w, "iterations", s->iterations);
        kd_w_kv_double(w, "relative_residual", s->relative_residual);
        kd_w_kv_double(w, "time_ms", s->time_ms);
        kd_w_kv_str(w, "message", s->message);
    }
}
