# Shared settings of the single-host test SLURM (sourced by up.sh and down.sh).
# Everything lives under MONTA_SLURM_DIR: configs, munge key and socket, the accounting database,
# spool directories, logs and pid files. Ports are off the SLURM/MariaDB defaults so that nothing
# already running on this host is touched.
MONTA_SLURM_DIR=${MONTA_SLURM_DIR:-/tmp/monta-slurm}
MONTA_SLURM_NODES=${MONTA_SLURM_NODES:-2}     # slurmd daemons on this host (multiple-slurmd), named n1..nN
MONTA_SLURM_CPUS=${MONTA_SLURM_CPUS:-4}       # CPUs each node declares (overrides the hardware count)
MONTA_SLURM_PORT=${MONTA_SLURM_PORT:-16817}   # slurmctld; slurmdbd +3, MariaDB +4, slurmd +10.. +10+N-1
CLUSTER=monta
PARTITION=debug
ACCOUNT=monta
D=$MONTA_SLURM_DIR
CTLD_PORT=$MONTA_SLURM_PORT
DBD_PORT=$((MONTA_SLURM_PORT + 3))
DB_PORT=$((MONTA_SLURM_PORT + 4))
SLURMD_PORT0=$((MONTA_SLURM_PORT + 10))
export SLURM_CONF=$D/etc/slurm.conf
# daemon -> pid file; down.sh stops exactly these, newest first
PIDFILES="munged:$D/run/munged.pid mariadbd:$D/run/mariadbd.pid slurmdbd:$D/run/slurmdbd.pid slurmctld:$D/run/slurmctld.pid"
for i in $(seq 1 "$MONTA_SLURM_NODES"); do PIDFILES="$PIDFILES slurmd:$D/run/slurmd-n$i.pid"; done
