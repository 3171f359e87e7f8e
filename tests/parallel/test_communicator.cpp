// The single-process communicator (the base case every build has) and the
// tensor-parallel size check every rank runs at start-up.
#include <gtest/gtest.h>

#include <vector>

#include "parallel/communicator.h"

namespace pagoda::parallel {
namespace {

TEST(SingleProcessCommunicator, CollectivesAreIdentities) {
  auto comm = make_single_process_communicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->name(), "single-process");
  std::vector<float> x = {1.5f, -2.0f, 3.25f};
  comm->all_reduce_sum(x.data(), 3);
  EXPECT_EQ(x, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  std::vector<float> gathered(3, 0.0f);
  comm->all_gather(x.data(), 3, gathered.data());
  EXPECT_EQ(gathered, x);
  std::vector<float> rooted(3, 0.0f);
  comm->gather(x.data(), 3, rooted.data(), 0);
  EXPECT_EQ(rooted, x);
  int64_t v = 42;
  comm->broadcast(&v, sizeof(v), 0);
  EXPECT_EQ(v, 42);
  EXPECT_TRUE(comm->all_ok(true));
  EXPECT_FALSE(comm->all_ok(false));
}

TEST(SingleProcessCommunicator, WorldWithoutInitIsSingleProcess) {
  EXPECT_EQ(world().size(), 1);
  EXPECT_EQ(world().rank(), 0);
}

TEST(CheckTensorParallelSize, MatchingSizeIsAccepted) {
  auto comm = make_single_process_communicator();
  EXPECT_NO_THROW(check_tensor_parallel_size(1, *comm));
}

TEST(CheckTensorParallelSize, MismatchIsRefusedWithTheFix) {
  auto comm = make_single_process_communicator();
  try {
    check_tensor_parallel_size(2, *comm);
    FAIL() << "no error";
  } catch (const ParallelConfigError& e) {
    const std::string msg = e.what();
    if (built_with_mpi()) {
      EXPECT_NE(msg.find("does not match the 1 process(es)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("mpirun -np 2"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("built without MPI"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(check_tensor_parallel_size(0, *comm), ParallelConfigError);
}

TEST(CpusInAffinityMask, AtLeastOne) { EXPECT_GE(cpus_in_affinity_mask(), 1); }

}  // namespace
}  // namespace pagoda::parallel
