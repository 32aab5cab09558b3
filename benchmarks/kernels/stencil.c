/* A barrier every few milliseconds (like the NAS MG kernel's sweeps): Jacobi
 * relaxation of an N x N grid.  Each sweep's rows are split statically over
 * the OpenMP threads, which meet at the sweep's end (the implicit barrier of
 * "omp for") because the next sweep reads every row this one wrote: one
 * thread behind holds all the others.
 *
 *     stencil N SWEEPS
 *
 * Prints the grid's centre value, so that the compiler keeps the work.
 */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    long n = argc == 3 ? atol(argv[1]) : 0, sweeps = argc == 3 ? atol(argv[2]) : 0;
    if (n < 3 || sweeps <= 0) {
        fprintf(stderr, "usage: stencil N SWEEPS\n");
        return 2;
    }
    double *a = calloc(n * n, sizeof *a), *b = calloc(n * n, sizeof *b);
    if (a == NULL || b == NULL) {
        perror("stencil");
        return 1;
    }
    for (long j = 0; j < n; j++)            /* a hot edge, the rest cold */
        a[j] = b[j] = 1.0;

#pragma omp parallel
    for (long s = 0; s < sweeps; s++) {
        const double *src = s % 2 ? b : a;
        double *dst = s % 2 ? a : b;
#pragma omp for schedule(static)
        for (long i = 1; i < n - 1; i++)
            for (long j = 1; j < n - 1; j++)
                dst[i * n + j] = 0.25 * (src[(i - 1) * n + j] + src[(i + 1) * n + j]
                                         + src[i * n + j - 1] + src[i * n + j + 1]);
    }
    printf("centre %.9e\n", (sweeps % 2 ? b : a)[n / 2 * n + n / 2]);
    free(a);
    free(b);
    return 0;
}
