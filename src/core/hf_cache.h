/* Hugging Face Hub names ("Qwen/Qwen3-8B", "tatsu-lab/alpaca") read from the local Hugging Face cache, as
 * huggingface_hub lays it out: <cache>/<models|datasets>--<owner>--<name>/refs/<revision> holds the commit a
 * revision points at, and snapshots/<commit>/ the files. The cache is HF_HUB_CACHE, else HF_HOME/hub, else
 * XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. Nothing is ever downloaded. */
#ifndef TT_CORE_HF_CACHE_H
#define TT_CORE_HF_CACHE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { TT_HF_MODEL, TT_HF_DATASET } tt_hf_repo_kind;

/* Whether name reads as a Hub repository id (owner/name of letters, digits, '-', '_', '.'; neither part starting
 * with '.') rather than a path: the caller asks only for a name that is not an existing path. */
bool tt_hf_is_repo_id(const char *name);

/* The cache directory (malloc'd), by the variables above. */
char *tt_hf_cache_dir(void);

/* The snapshot directory of repo_id at revision (NULL: "main"; a branch or tag name from refs/, or a commit hash),
 * malloc'd; NULL when the cache does not hold it, with why (the path looked for and what to do) in why. */
char *tt_hf_cache_snapshot(const char *repo_id, tt_hf_repo_kind kind, const char *revision, char *why, size_t why_size);

/* name as a local path (malloc'd): name itself when it is a path here or no Hub name, else its snapshot in the
 * cache; tt_die naming what ("base_model", "--adapter") when the cache does not hold it. */
char *tt_hf_local_path(const char *name, tt_hf_repo_kind kind, const char *revision, const char *what);

/* The snapshot directory (malloc'd) when name is a Hub name (no path here) that the cache holds; NULL otherwise. */
char *tt_hf_cached_path(const char *name, tt_hf_repo_kind kind, const char *revision);

/* Nothing when name is a path here or no Hub name; else tt_die with what the cache lacks (what: the key). For the
 * places a run first opens a path key, which the configuration's load has replaced by its snapshot when the cache
 * holds it. */
void tt_hf_check_path(const char *name, tt_hf_repo_kind kind, const char *revision, const char *what);

#endif
