// Accelerated mini-batch SDCA (ASDCA: Shalev-Shwartz and Zhang,
// "Accelerated Mini-Batch Stochastic Dual Coordinate Ascent", NIPS 2013,
// their Figure 1; the reference's Algorithm 2) over rows packed with one
// thread (PackedRows), for the smooth losses.
//
// In the engine's terms (loss.h: P(w) = sum_i s_i phi_i(x_i.w) + l2/2 |w|^2
// + l1 |w|_1, optimality alpha_i = -phi_i'(x_i.w)), the paper's problem is
// P / n: its phi_i(w) = s_i phi_i(x_i.w), its lambda = l2 / n, its vector
// duals s_i alpha_i x_i, and its grad g*(alpha bar) the engine's
// v = shrink(W), W = (1/l2) sum_i s_i alpha_i x_i (the weight table). Each
// step, on a mini-batch I of m rows:
//   u = (1 - theta) w + theta v
//   alpha_i <- (1 - theta) alpha_i + theta (-phi_i'(x_i.u))   for i in I
//   W moves by the duals' changes (so v changes on the batch's slots only)
//   w <- (1 - theta) w + theta v
// w is the accelerated ("momentum") iterate, kept between calls; the
// weights returned are W, so that W(alpha) and alpha are a primal-dual pair
// whose exact gap (PackedRows::Evaluate) certifies them.
//
// The update of w is dense but affine with a fixed point v_j on every slot
// the batch does not touch: between two changes of v_j, at step t,
//   w_j(t) = v_j + (1 - theta)^(t - t0_j) (w_j(t0_j) - v_j),
// so each slot keeps (t0_j, w_j(t0_j) - v_j) and is materialised only when
// a batch changes its v_j or at the end of the call: a step costs
// O(nnz of the batch), not O(slots).
#ifndef TF_SDCA_KERNELS_CORE_ASDCA_H_
#define TF_SDCA_KERNELS_CORE_ASDCA_H_

#include <cstdint>
#include <string>

#include "kernels/core/loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"

namespace tf_sdca {

// True for a loss ASDCA converges for: a smooth one (DualStrongConvexity()
// > 0: logistic, squared, smooth hinge). Otherwise false and *error names
// the loss and suggests smooth_hinge_loss.
bool AsdcaSupportsLoss(const DualLossUpdater& loss, std::string* error);

// The paper's theta for batches of m rows:
//   theta = 1/4 min{1, sqrt(k / m), k, k^(2/3) / m^(1/3)},
//   k = gamma lambda n = l2 * gamma_loss / max_i s_i |x_i|^2
// (1 / gamma the smoothness of the paper's phi_i(w) = s_i phi_i(x_i.w):
// phi'' <= 1 / gamma_loss times s_i |x_i|^2; its lambda n = l2). 1/4 when
// no row with s_i > 0 has a feature.
double AsdcaTheoryTheta(const PackedRows& rows, const DualLossUpdater& loss,
                        double l2, int64_t batch_size);

// options.num_inner_iterations passes (each a permutation of the rows,
// drawn like the 'permutation' order from (options.seed, pass), dealt into
// consecutive batches of `batch_size` rows, the last one shorter) of ASDCA
// with `theta` in (0, 1]; `weights` (W, [num_slots()], unshrunk), `duals`
// ([n]) and `iterate` (w, [num_slots()], already shrunk: the weights a
// prediction would use) updated in place. options.loss must be supported
// (AsdcaSupportsLoss), the rows packed with one thread, options.order and
// num_loss_partitions are ignored. Rows with s_i <= 0 are skipped. Stops
// between batches when options.Cancelled().
void SolveAsdca(const PackedRows& rows, const SolverOptions& options,
                int64_t batch_size, double theta, double* weights,
                double* duals, double* iterate);

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_ASDCA_H_
