# Regression check: the AllToAll records of this run against a stored baseline (Hodges-Lehmann
# slowdown, its bootstrap CI widened by the between-run spread; a baseline file holding several runs
# measures that spread). `snakemake regress` runs it alone.


rule regress:
    input:
        unpack(get_regress_input),
    output:
        report("results/regress/alltoall.md", caption="../report/regress.rst", category="Regression check"),
    log:
        "results/logs/regress/alltoall.log",
    params:
        r=REG,
        require="1" if REG["require_baseline"] else "0",
        fail="1" if REG["fail"] else "0",
    conda:
        "../envs/monta.yaml"
    shell:
        # Snakemake's shell runs with `set -e -o pipefail`: catch the exit status, or a regression
        # (exit 1) would stop the run even with fail: false.
        "if [ -f {params.r[baseline]} ]; then"
        " rc=0; monta regress --baseline {params.r[baseline]} --current {input.current}"
        " --threshold {params.r[threshold]} --metric {params.r[metric]} --out {output} 2>&1 | tee {log} || rc=$?;"
        # fail: false only reports, so a baseline this run cannot be compared with (another config's
        # points, an unreadable file: exit 2) becomes the table's one line rather than a failed run.
        " if [ $rc = 2 -a {params.fail} = 0 ]; then"
        " echo \"regress: no verdict: $(tail -n 1 {log} | sed 's/^monta: error: //')\" > {output}; rc=0; fi;"
        " [ $rc = 0 ] || [ $rc = 1 -a {params.fail} = 0 ];"
        " else"
        " echo 'regress: stored baseline {params.r[baseline]} is missing; after a run you trust:"
        " cp {input.current} {params.r[baseline]} && git add {params.r[baseline]}' | tee {output} {log} >&2;"
        " [ {params.require} = 0 ];"
        " fi"
