# kernels/cuda/*.cu as host C++ for the emulator (include/cuda_runtime.h): a launch
# `k<<<grid, block, shared, stream>>>(args)` becomes
# `ac_emu_launch("k", k, ac_emu_config(grid, block, shared, stream))(args)`, and
# `extern __shared__ T name[];` a pointer to the launch's dynamic shared memory, and
# `__shared__ T name[...];` a static array that each block finds filled with NaNs (as
# the dynamic memory is), so that a read before a write or a missing barrier shows.
# Lines keep their numbers, so compiler messages point into the .cu file.
s/([A-Za-z_][A-Za-z0-9_]*)<<</ac_emu_launch("\1", \1, ac_emu_config(/g
s/>>>\(/))(/g
s/extern __shared__ ([A-Za-z_][A-Za-z0-9_]*) ([A-Za-z_][A-Za-z0-9_]*)\[\];/\1 *\2 = (\1 *)ac_emu_dynamic_shared();/
s/__shared__ ([A-Za-z_][A-Za-z0-9_]*) ([A-Za-z_][A-Za-z0-9_]*)(\[[^;]*\]);/static \1 \2\3; ac_emu_fresh_shared(\2, sizeof \2);/
