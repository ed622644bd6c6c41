/* A 5-point stencil: the border is copied, the interior (an affine if) averaged. */
#pragma einkern sizes n=89
#pragma einkern array B[n][n]
void stencil(int n, double A[n][n], double *restrict B)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            B[i][j] = A[i][j];
            if (i >= 1 && i <= n - 2 && j >= 1 && j <= n - 2)
                B[i][j] = 0.2 * (A[i][j] + A[i - 1][j] + A[i + 1][j] + A[i][j - 1] + A[i][j + 1]);
        }
}
