// The tensor-parallel model in one process: N threads, each a rank with its
// own shard, joined by an in-memory communicator. Rank 0's logits must
// equal the unsharded model's (prefill of every position, then a decode
// step) within 1e-4 relative; bad splits are refused. (The MPI runs are in
// tests/e2e/test_tensor_parallel.sh.)
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstring>
#include <thread>
#include <vector>

#include "forward_test_util.h"
#include "models/model.h"
#include "parallel/communicator.h"

namespace pagoda {
namespace {

// Shared state of a thread group; each rank gets a ThreadCommunicator.
struct ThreadGroup {
  explicit ThreadGroup(int n) : size(n), sync(n), buffers(n), flags(n) {}
  int size;
  std::barrier<> sync;
  std::vector<const void*> buffers;
  std::vector<int> flags;
};

class ThreadCommunicator final : public parallel::Communicator {
 public:
  ThreadCommunicator(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size; }
  void all_reduce_sum(float* data, int64_t n) override {
    publish(data);
    std::vector<float> sum(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < g_.size; ++r) {  // the same order on every rank
      const auto* x = static_cast<const float*>(g_.buffers[r]);
      for (int64_t i = 0; i < n; ++i) sum[i] += x[i];
    }
    g_.sync.arrive_and_wait();
    std::copy(sum.begin(), sum.end(), data);
  }
  void all_gather(const float* send, int64_t n, float* recv) override {
    publish(send);
    for (int r = 0; r < g_.size; ++r) {
      std::memcpy(recv + r * n, g_.buffers[r], static_cast<size_t>(n) * sizeof(float));
    }
    g_.sync.arrive_and_wait();
  }
  void gather(const float* send, int64_t n, float* recv, int root) override {
    publish(send);
    if (rank_ == root) {
      for (int r = 0; r < g_.size; ++r) {
        std::memcpy(recv + r * n, g_.buffers[r], static_cast<size_t>(n) * sizeof(float));
      }
    }
    g_.sync.arrive_and_wait();
  }
  void broadcast(void* data, int64_t bytes, int root) override {
    publish(data);
    if (rank_ != root) std::memcpy(data, g_.buffers[root], static_cast<size_t>(bytes));
    g_.sync.arrive_and_wait();
  }
  bool all_ok(bool ok) override {
    g_.flags[rank_] = ok;
    g_.sync.arrive_and_wait();
    const bool all = std::all_of(g_.flags.begin(), g_.flags.end(), [](int f) { return f != 0; });
    g_.sync.arrive_and_wait();
    return all;
  }
  [[noreturn]] void abort(int code) override { std::abort(); }
  std::string name() const override { return "threads"; }

 private:
  void publish(const void* p) {
    g_.buffers[rank_] = p;
    g_.sync.arrive_and_wait();
  }
  ThreadGroup& g_;
  int rank_;
};

void expect_tp_matches(const std::string& dir, int tp) {
  const std::vector<int32_t> prompt = {1, 45, 300, 17, 88, 102, 7, 256, 3, 99};
  const int32_t next = 140;
  auto single = load_model(dir);
  const std::vector<float> want = test::prefill_and_decode(*single, prompt, next);

  ThreadGroup group(tp);
  std::vector<float> got;
  std::vector<std::string> errors(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadCommunicator comm(group, r);
        auto model = load_model(dir, comm);
        // A K row of this rank's kv heads: the whole model's / tp, at least one head.
        const auto row_bytes = [](const CausalLM& m) {
          return m.kv_cache_specs(DType::F32).at(0).spec.entry_bytes;
        };
        const int64_t head_bytes = single->config().head_dim * 4;
        EXPECT_EQ(row_bytes(*model), std::max(head_bytes, row_bytes(*single) / tp));
        std::vector<float> out = test::prefill_and_decode(*model, prompt, next, r == 0);
        if (r == 0) got = std::move(out);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < tp; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(test::worst_relative_error(got, want, single->config().vocab_size), 1e-4)
      << "tp " << tp;
}

TEST(TensorParallelThreads, Stories260kTp2) {
  expect_tp_matches(PAGODA_MODELS_DIR "/stories260k", 2);
}
TEST(TensorParallelThreads, Stories260kTp4) {
  expect_tp_matches(PAGODA_MODELS_DIR "/stories260k", 4);
}
TEST(TensorParallelThreads, Stories260kBf16Tp2) {
  expect_tp_matches(PAGODA_TEST_DATA_DIR "/stories260k-bf16", 2);
}

TEST(TensorParallelThreads, HeadsThatDoNotSplitAreRefused) {
  ThreadGroup group(3);
  ThreadCommunicator comm(group, 0);  // no collective happens before the check
  try {
    load_model(PAGODA_MODELS_DIR "/stories260k", comm);
    FAIL() << "no error";
  } catch (const parallel::ParallelConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads 8 is not divisible by 3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pagoda
