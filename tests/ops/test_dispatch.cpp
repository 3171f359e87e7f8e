// ISA selection: detection, defaults, forcing, and rejecting what the CPU
// lacks.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace pagoda::ops {
namespace {

TEST(Dispatch, DefaultIsBestSupported) {
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_TRUE(isa_supported(best_isa()));
  EXPECT_EQ(current_isa(), best_isa());
  // best_isa is the widest supported one.
  if (isa_supported(Isa::Avx512Bf16)) {
    EXPECT_EQ(best_isa(), Isa::Avx512Bf16);
  } else if (isa_supported(Isa::Avx512)) {
    EXPECT_EQ(best_isa(), Isa::Avx512);
  } else if (isa_supported(Isa::Avx2)) {
    EXPECT_EQ(best_isa(), Isa::Avx2);
  }
}

TEST(Dispatch, AvxImpliesItsPrerequisites) {
  if (isa_supported(Isa::Avx512Bf16)) {
    EXPECT_TRUE(isa_supported(Isa::Avx512));
  }
  EXPECT_EQ(isa_supported(Isa::Avx512Bf16),
            isa_supported(Isa::Avx512) && __builtin_cpu_supports("avx512bf16") != 0);
  if (isa_supported(Isa::Avx512)) {
    EXPECT_TRUE(isa_supported(Isa::Avx2));
  }
  EXPECT_EQ(isa_supported(Isa::Avx2),
            __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0);
}

TEST(Dispatch, SetIsaSelectsOrRejects) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    if (isa_supported(isa)) {
      set_isa(isa);
      EXPECT_EQ(current_isa(), isa);
    } else {
      const Isa before = current_isa();
      EXPECT_THROW(set_isa(isa), InputError) << isa_name(isa);
      EXPECT_EQ(current_isa(), before);
    }
  }
  set_isa(best_isa());
}

TEST(Dispatch, NamesAreDistinct) {
  const std::set<std::string> names = {isa_name(Isa::Scalar), isa_name(Isa::Avx2),
                                       isa_name(Isa::Avx512), isa_name(Isa::Avx512Bf16)};
  EXPECT_EQ(names.size(), 4u);
  EXPECT_EQ(std::string(isa_name(Isa::Scalar)), "scalar");
}

}  // namespace
}  // namespace pagoda::ops
