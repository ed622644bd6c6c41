/* Lower-triangular matrix-vector product y = L x (only the lower triangle is read). */
#pragma einkern sizes n=399
void trmv(int n, double L[n][n], double x[n], double y[n])
{
    for (int i = 0; i < n; i++) {
        y[i] = 0.0;
        for (int j = 0; j <= i; j++)
            y[i] += L[i][j] * x[j];
    }
}
