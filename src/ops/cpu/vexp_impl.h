// vexp: e^x on one vector of the ISA's Vec interface (vec_<isa>.h). Included
// inside an ISA's namespace (kernels_impl.h, flash_attention_avx512bf16.cpp)
// so that the softmax of every attention kernel uses the one polynomial.
// e^x by range reduction: x = n ln2 + r with |r| <= ln2 / 2, e^r by its
// degree-6 Taylor polynomial (relative error ~1.2e-7), times 2^n. x is
// clamped to [-87, 88], where 2^n stays a normal float.
PAGODA_TARGET inline Vec vexp(Vec x) {
  x = vmax(vmin(x, vset1(88.0f)), vset1(-87.0f));
  const Vec n = vround(vmul(x, vset1(1.44269504f)));
  Vec r = vfma(n, vset1(-0.693145751953125f), x);  // ln2 in two parts: the
  r = vfma(n, vset1(-1.428606765330187e-06f), r);  // first times n is exact
  Vec p = vset1(1.0f / 720);
  p = vfma(p, r, vset1(1.0f / 120));
  p = vfma(p, r, vset1(1.0f / 24));
  p = vfma(p, r, vset1(1.0f / 6));
  p = vfma(p, r, vset1(0.5f));
  p = vfma(p, r, vset1(1.0f));
  p = vfma(p, r, vset1(1.0f));
  return vldexp(p, n);
}
