/* C = alpha A + beta C on the lower triangle only (two parallel loops over a
   triangle: on the GPU, only the non-empty tiles are launched). */
#pragma einkern sizes n=387
void lower_axpby(int n, double alpha, double beta, double A[n][n], double C[n][n])
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            C[i][j] = alpha * A[i][j] + beta * C[i][j];
}
