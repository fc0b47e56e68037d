/* autocompress compress: the whole pipeline, resumable, ending in a measured checkpoint
 * and its report. */
#include "cli.h"
#include "cli_opts.h"
#include "cli_tables.h"

#include <stdio.h>

#include "autocompress/compress.h"

static ac_status parse_method(const char *value, void *dst)
{
    return ac_compress_method_from_name(value, dst);
}

static int parse_args(int argc, char **argv, ac_compress_params *p)
{
    const cli_opt opts[] = {
        CLI_REQUIRED("model", &p->model_dir, "DIR", "the parent checkpoint"),
        CLI_REQUIRED("contract", &p->contract_path, "FILE", "the deployment contract"),
        CLI_REQUIRED("data", &p->data_dir, "DIR", "token shards: train.bin (search, KD), val.bin (eval)"),
        CLI_REQUIRED("out", &p->out_dir, "DIR", "every stage's artifacts; a rerun resumes here"),
        CLI_TEXT("tables", &p->tables_path, "FILE", "cost tables of this parent and contract (default: profile them)"),
        CLI_TEXT("tables-cache", &p->tables_cache, "DIR",
                 "without --tables: reuse tables profiled here before for the same parent, space and workload, "
                 "and keep new ones there"),
        CLI_FOREIGN_TABLES(&p->foreign_tables),
        CLI_CUSTOM("method", &p->method, "autocompress|minitron++", "how the architecture is chosen (default: autocompress)",
                   parse_method),
        CLI_NUMBER("search-tokens", CLI_I64, &p->search_tokens, "N", "search tokens (default: the contract's budget)", 1,
                   INT64_MAX),
        CLI_NUMBER("kd-tokens", CLI_I64, &p->kd_tokens, "N", "KD tokens (default: the contract's budget)", 1, INT64_MAX),
        CLI_NUMBER("batch", CLI_INT, &p->batch, "B", "KD sequences per step", 1, 65536),
        CLI_NUMBER("seq-len", CLI_INT, &p->seq_len, "T", "tokens per sequence (search, KD, eval)", 2, 1 << 20),
        CLI_REAL("lr", CLI_FLOAT, &p->kd_lr, "X", "peak learning rate of the KD (AdamW, cosine)"),
        CLI_NUMBER("candidates", CLI_INT, &p->candidates, "K", "minitron++: candidates ranked (measured, short KDs)", 1,
                   1000),
        CLI_NUMBER("candidate-tokens", CLI_I64, &p->candidate_tokens, "N",
                   "minitron++: selection tokens of each, 3/4 short KD and 1/4 held-out score (default: 2 x search "
                   "tokens / K)", 1, INT64_MAX),
        CLI_NUMBER("rerank", CLI_INT, &p->rerank, "K",
                   "autocompress: the search's top K candidates measured and ranked by short KDs (default 4; 0: the "
                   "search's pick as it is)", 0, 1000),
        CLI_REAL("rerank-share", CLI_DOUBLE, &p->rerank_share, "F",
                 "autocompress: the fraction of the search tokens beyond the calibration for the ranking's KDs and "
                 "scores (default 0.5)"),
        CLI_NUMBER("measure-candidates", CLI_INT, &p->measure_candidates, "0|1",
                   "1 (default): ranked candidates that miss a target when measured cannot be chosen; 0: trust the "
                   "cost model", 0, 1),
        CLI_NUMBER("profile-repeats", CLI_INT, &p->profile_repeats, "R", "profiling sweeps (without --tables)", 1, 64),
        CLI_NUMBER("measure-sweeps", CLI_INT, &p->measure_sweeps, "N", "measurement processes of the result", 1, 100),
        CLI_NUMBER("eval-batches", CLI_INT, &p->eval_batches, "N", "held-out batches for eval (0: all of val.bin)", 0,
                   1 << 20),
        CLI_NUMBER("seed", CLI_U64, &p->seed, "S", "seed of batches, calibration and prompts", 0, INT64_MAX),
        CLI_TEXT("from", &p->from_stage, "STAGE", "run this stage and the later ones again (e.g. measure)"),
        CLI_PROGRESS_OPT(&p->progress),
    };
    const cli_spec spec = {"compress", NULL,
                           "Profiles the contract's search space (or reads --tables), searches the architecture\n"
                           "(AutoCompress's routers, or the Minitron++ baseline), prunes the importance-ordered\n"
                           "parent to it, distills it from the parent for the KD-token budget, measures it under\n"
                           "the contract's workload and evaluates it on held-out tokens. OUT/model is the result;\n"
                           "OUT/report.md and report.json say what was chosen, what it costs against the targets\n"
                           "and how much quality it kept. A rerun with the same options resumes at the first\n"
                           "unfinished stage. Every input is checked before the first stage.\n"
                           "The targets are judged on the result's measured cost (report.json's measured).\n"
                           CLI_EXIT_TARGETS_TEXT("the result meets every target when measured"),
                           opts, CLI_COUNT(opts), 0, 0};
    return cli_parse(&spec, argc, argv, NULL);
}

int cli_compress(int argc, char **argv)
{
    ac_compress_params p = ac_compress_default_params();
    int rc = parse_args(argc, argv, &p);
    if (rc != CLI_PARSED)
        return rc;
    ac_compress_report r;
    ac_status st = ac_compress_run(&p, &r);
    if (st != AC_OK) {
        fprintf(stderr, "autocompress compress: %s\n", ac_error_message());
        return cli_exit_status(st);
    }
    printf("compress (%s): %d stages run, %d already done; %lld search + %lld KD tokens, final KD loss %.4f; "
           "%s when measured -> %s/model, %s/report.md\n",
           ac_compress_method_name(p.method), r.stages_run, r.stages_skipped, (long long)r.search_tokens,
           (long long)r.kd_tokens, r.kd_loss, r.pass ? "meets its contract" : "MISSES its contract", p.out_dir,
           p.out_dir);
    return cli_exit_verdict(r.pass);
}
