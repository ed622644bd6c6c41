/* symv: y = alpha A x + beta y for symmetric A stored in its lower triangle; the
   upper triangle is never read.  Each stored element A[i][j] (j < i) is read once
   and used twice: for y[i] and, as A[j][i], for y[j]. */
#pragma einkern sizes n=113
void symv(int n, double alpha, double beta, double A[n][n], double x[n], double y[n])
{
    for (int i = 0; i < n; i++)
        y[i] = beta * y[i];
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            y[i] += alpha * A[i][j] * x[j];
            if (j < i)
                y[j] += alpha * A[i][j] * x[i];
        }
}
