/* syr2k, lower triangle: C = alpha (A B^T + B A^T) + beta C for j <= i. */
#pragma einkern sizes n=110 m=67
void syr2k(int n, int m, double alpha, double beta, double C[n][n], double A[n][m],
           double B[n][m])
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j <= i; j++)
            C[i][j] *= beta;
        for (int k = 0; k < m; k++)
            for (int j = 0; j <= i; j++)
                C[i][j] += A[j][k] * alpha * B[i][k] + B[j][k] * alpha * A[i][k];
    }
}
