/* Lower-triangular solve L x = b (forward substitution): x is overwritten. */
#pragma einkern sizes n=299
void trsv(int n, double L[n][n], double x[n])
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++)
            x[i] -= L[i][j] * x[j];
        x[i] /= L[i][i];
    }
}
