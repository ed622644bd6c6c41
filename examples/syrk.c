/* Symmetric rank-k update, lower triangle: C = alpha A A^T + beta C (j <= i only). */
#pragma einkern sizes n=120 m=73
void syrk(int n, int m, double alpha, double beta, double C[n][n], double A[n][m])
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++)
            C[i][j] *= beta;
        for (int k = 0; k < m; k++)
            for (int j = 0; j <= i; j++)
                C[i][j] += alpha * A[i][k] * A[j][k];
    }
}
