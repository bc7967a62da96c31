// Standalone driver of the losses' coordinate steps, in float64 and without
// TensorFlow (the op rounds duals to float32, which hides the last digits of
// a step). Reads lines "loss label dual wx q" (label as the op receives it,
// e.g. {0, 1} for the binary losses) from stdin and writes per line
// "new_dual primal_loss dual_loss" of the converted label, with 17
// significant digits, or "error <message>" for a bad loss, label or number.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "kernels/core/loss.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string name, fields[4];
    if (!(in >> name >> fields[0] >> fields[1] >> fields[2] >> fields[3])) {
      continue;
    }
    // strtod, unlike operator>>, reads "nan" and "inf" (the sanitizer
    // corpus of tests/test_core_sanitizers.py has them).
    double numbers[4];
    bool parsed = true;
    for (int k = 0; k < 4; ++k) {
      char* end = nullptr;
      numbers[k] = std::strtod(fields[k].c_str(), &end);
      parsed = parsed && end != fields[k].c_str() && *end == '\0';
    }
    if (!parsed) {
      std::printf("error unparsable line\n");
      continue;
    }
    const double raw_label = numbers[0], dual = numbers[1], wx = numbers[2],
                 q = numbers[3];
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
