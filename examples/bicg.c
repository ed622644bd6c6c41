/* bicg: s = A^T r and q = A p in one sweep over A. */
#pragma einkern sizes m=83 n=97
void bicg(int m, int n, double A[n][m], double s[m], double q[n], double p[m], double r[n])
{
    for (int i = 0; i < m; i++)
        s[i] = 0;
    for (int i = 0; i < n; i++) {
        q[i] = 0.0;
        for (int j = 0; j < m; j++) {
            s[j] = s[j] + r[i] * A[i][j];
            q[i] = q[i] + A[i][j] * p[j];
        }
    }
}
