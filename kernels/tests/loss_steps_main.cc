// Standalone driver of the losses' coordinate steps, in float64 and without
// TensorFlow (the op rounds duals to float32, which hides the last digits of
// a step). Reads lines "loss label dual wx q" (label as the op receives it,
// e.g. {0, 1} for the binary losses) from stdin and writes per line
// "new_dual primal_loss dual_loss" of the converted label, with 17
// significant digits, or "error <message>" for a bad loss or label.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "kernels/core/loss.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string name;
    double raw_label, dual, wx, q;
    if (!(in >> name >> raw_label >> dual >> wx >> q)) continue;
    tf_sdca::LossType type;
    if (!tf_sdca::ParseLossType(name, &type)) {
      std::printf("error unknown loss %s\n", name.c_str());
      continue;
    }
    const std::unique_ptr<tf_sdca::DualLossUpdater> loss =
        tf_sdca::MakeLossUpdater(type, /*gamma=*/1.0);
    double label;
    std::string error;
    if (!loss->ConvertLabel(raw_label, &label, &error)) {
      std::printf("error label %s\n", error.c_str());
      continue;
    }
    const double a = loss->ComputeUpdatedDual(label, dual, wx, q);
    std::printf("%.17g %.17g %.17g\n", a, loss->PrimalLoss(wx, label),
                loss->DualLoss(a, label));
  }
  return 0;
}
