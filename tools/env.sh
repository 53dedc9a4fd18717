# Sourced by the tools/ scripts: the environment every ShardRT run under mpiexec needs.
# OpenMPI refuses to run as root without the two ALLOW variables; one BLAS thread per rank keeps oversubscribed
# ranks from fighting over the cores.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1
if [ -d /usr/local/cuda/bin ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
