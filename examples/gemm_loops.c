/* gemm written as loops: C = alpha A B + beta C. */
#pragma einkern sizes nj=301 nk=97
#define NI 48
void gemm(int nj, int nk, double alpha, double beta,
          double C[NI][nj], double A[NI][nk], double B[nk][nj])
{
    for (int i = 0; i < NI; i++) {
        for (int j = 0; j < nj; j++)
            C[i][j] *= beta;
        for (int k = 0; k < nk; k++)
            for (int j = 0; j < nj; j++)
                C[i][j] += alpha * A[i][k] * B[k][j];
    }
}
