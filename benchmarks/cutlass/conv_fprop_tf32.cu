// CUTLASS 3.x SM90 implicit-GEMM fprop (TF32, NHWC/KRSC), a speed and compile-time reference for issue 17.
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
using namespace cute;

#ifndef TILE_N
#define TILE_N 128
#endif
#ifndef CLUSTER_M
#define CLUSTER_M 1
#endif
#ifndef SCHEDULE
#define SCHEDULE cutlass::conv::collective::KernelScheduleAuto
#endif
#ifndef EPI_SCHEDULE
#define EPI_SCHEDULE cutlass::epilogue::TmaWarpSpecialized
#endif

using TileShapeMNK = Shape<_128, Int<TILE_N>, Shape<_32>>;
using ClusterShapeMNK = Shape<Int<CLUSTER_M>, _1, _1>;
using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShapeMNK, ClusterShapeMNK,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    float, cutlass::layout::TensorNHWC, 4, float, cutlass::layout::TensorNHWC, 4, EPI_SCHEDULE>::CollectiveOp;
using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop,
    float, cutlass::layout::TensorNHWC, 4, float, cutlass::layout::TensorNHWC, 4, float,
    TileShapeMNK, ClusterShapeMNK,
    cutlass::conv::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    SCHEDULE>::CollectiveOp;
using ProblemShape = cutlass::conv::ConvProblemShape<CollectiveMainloop::DispatchPolicy::ConvOp,
                                                     CollectiveMainloop::DispatchPolicy::NumSpatialDimensions>;
using ConvKernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
using Conv = cutlass::conv::device::ConvUniversalAdapter<ConvKernel>;

static Conv conv_op;
static void* workspace = nullptr;

// act NHWC [N,H,W,C], flt KRSC [K,R,S,C], out NPQK; pad symmetric, stride 1, dilation 1.
extern "C" int cutlass_conv_setup(const float* act, const float* flt, float* out, int N, int H, int W, int C, int K, int R,
                                  int S, int pad) {
  ProblemShape ps(cutlass::conv::Mode::kCrossCorrelation, {N, H, W, C}, {K, R, S, C}, {pad, pad}, {pad, pad}, {1, 1}, {1, 1}, 1);
  cutlass::KernelHardwareInfo hw;
  cudaGetDevice(&hw.device_id);
  hw.sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count(hw.device_id);
  typename ConvKernel::StrideC sc{};
  typename ConvKernel::StrideD sd{};
  cute::for_each(cute::make_seq<cute::rank<0>(typename ConvKernel::StrideC{})>{}, [&](auto i) {
    cute::get<0, i>(sc) = ps.stride_C[ProblemShape::RankT - 2 - i];
    cute::get<0, i>(sd) = ps.stride_C[ProblemShape::RankT - 2 - i];
  });
  typename Conv::Arguments args{ps, {act, flt}, {{}, out, sc, out, sd}, hw, {}};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  if (conv_op.can_implement(args) != cutlass::Status::kSuccess) return 1;
  size_t ws = Conv::get_workspace_size(args);
  if (workspace) cudaFree(workspace);
  workspace = nullptr;
  if (ws) cudaMalloc(&workspace, ws);
  if (conv_op.initialize(args, workspace) != cutlass::Status::kSuccess) return 2;
  return 0;
}

extern "C" int cutlass_conv_run(cudaStream_t stream) { return conv_op.run(stream) == cutlass::Status::kSuccess ? 0 : 3; }
extern "C" int cutlass_conv_smem() { return int(ConvKernel::SharedStorageSize); }
