// Random test inputs: n values drawn from N(0, scale^2) by kvad's Rng, as float (the kernels'
// inputs) or double (the float64 gradient checks). One definition for every test that needs them.
#pragma once
#include <cstddef>
#include <vector>

#include "core/rng.h"

namespace kvad::test {

template <typename T = float>
std::vector<T> randn(Rng& r, size_t n, double scale = 1.0) {
  std::vector<T> v(n);
  for (T& x : v) x = (T)(scale * r.normal());
  return v;
}

}  // namespace kvad::test
