/* Independent equal work, one barrier at the end (like the NAS EP kernel):
 * the OpenMP threads share a loop of pseudo-random pairs statically, each
 * counts the Gaussian deviates its pairs give (Marsaglia's polar method),
 * and the counts are summed once, when the loop ends.
 *
 *     ep MILLIONS_OF_PAIRS
 *
 * Prints the deviates' sums and counts per square annulus, so that the
 * compiler keeps the work.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define ANNULI 10

/* A counter-based generator (splitmix64's finaliser): pair i is the same
 * whichever thread draws it, so every thread count does the same work. */
static double uniform(uint64_t key)
{
    key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ULL;
    key = (key ^ (key >> 27)) * 0x94d049bb133111ebULL;
    key ^= key >> 31;
    return (double)(key >> 11) * 0x1.0p-53;
}

int main(int argc, char **argv)
{
    if (argc != 2 || atol(argv[1]) <= 0) {
        fprintf(stderr, "usage: ep MILLIONS_OF_PAIRS\n");
        return 2;
    }
    long pairs = atol(argv[1]) * 1000000L;
    long counts[ANNULI] = {0};
    double sx = 0.0, sy = 0.0;

#pragma omp parallel for schedule(static) reduction(+ : sx, sy, counts[:ANNULI])
    for (long i = 0; i < pairs; i++) {
        double x = 2.0 * uniform(2 * (uint64_t)i) - 1.0;
        double y = 2.0 * uniform(2 * (uint64_t)i + 1) - 1.0;
        double t = x * x + y * y;
        if (t > 0.0 && t <= 1.0) {
            double f = sqrt(-2.0 * log(t) / t);
            double gx = x * f, gy = y * f;
            int annulus = (int)fmax(fabs(gx), fabs(gy));
            if (annulus < ANNULI)
                counts[annulus]++;
            sx += gx;
            sy += gy;
        }
    }
    printf("sx %.6e sy %.6e counts", sx, sy);
    for (int a = 0; a < ANNULI; a++)
        printf(" %ld", counts[a]);
    printf("\n");
    return 0;
}
