/*
 * krylov-bench-solve: `krylov-bench solve` as a program of its own, for a build without the
 * krylov-bench dispatcher (bench/krylov_bench.c), which calls the same kd_bench_solve_main.
 */
int kd_bench_solve_main(int argc, char **argv);

int main(int argc, char **argv)
{
    return kd_bench_solve_main(argc, argv);
}
