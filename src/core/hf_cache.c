/* Hub names in the local Hugging Face cache (hf_cache.h). */
#include "core/hf_cache.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"

static bool is_repo_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.'; }

bool tt_hf_is_repo_id(const char *name) {
    const char *slash = strchr(name, '/');
    if (!slash || slash == name || strchr(slash + 1, '/') || !slash[1]) return false;
    if (name[0] == '.' || slash[1] == '.' || strlen(name) > 200) return false;
    for (const char *p = name; *p; p++)
        if (p != slash && !is_repo_char(*p)) return false;
    return true;
}

char *tt_hf_cache_dir(void) {
    const char *hub = getenv("HF_HUB_CACHE");
    if (!hub || !*hub) hub = getenv("HUGGINGFACE_HUB_CACHE"); /* huggingface_hub's older name */
    char buf[4096];
    if (hub && *hub) return tt_xstrdup(hub);
    const char *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"), *user = getenv("HOME");
    if (home && *home) snprintf(buf, sizeof buf, "%s/hub", home);
    else if (xdg && *xdg) snprintf(buf, sizeof buf, "%s/huggingface/hub", xdg);
    else snprintf(buf, sizeof buf, "%s/.cache/huggingface/hub", user && *user ? user : "");
    return tt_xstrdup(buf);
}

static bool is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_commit_hash(const char *s) {
    size_t n = strlen(s);
    if (n != 40) return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) return false;
    return true;
}

/* refs/<revision>'s commit into commit (40 hex digits); false when the file is absent or holds something else. */
static bool read_ref(const char *repo_dir, const char *revision, char commit[41]) {
    size_t size = strlen(repo_dir) + strlen(revision) + 8;
    char *path = tt_xmalloc(size, "a path");
    snprintf(path, size, "%s/refs/%s", repo_dir, revision);
    FILE *f = strstr(revision, "..") ? NULL : fopen(path, "r"); /* a revision names a file under refs/ */
    free(path);
    if (!f) return false;
    char text[64] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    while (n > 0 && isspace((unsigned char)text[n - 1])) text[--n] = 0;
    if (!is_commit_hash(text)) return false;
    memcpy(commit, text, 41);
    return true;
}

char *tt_hf_cache_snapshot(const char *repo_id, tt_hf_repo_kind kind, const char *revision, char *why,
                           size_t why_size) {
    char *cache = tt_hf_cache_dir();
    const char *slash = strchr(repo_id, '/');
    char repo_dir[4400];
    snprintf(repo_dir, sizeof repo_dir, "%s/%s--%.*s--%s", cache, kind == TT_HF_MODEL ? "models" : "datasets",
             (int)(slash - repo_id), repo_id, slash + 1);
    free(cache);
    const char *rev = revision && *revision ? revision : "main";
    const char *download = kind == TT_HF_MODEL ? "hf download %s%s%s" : "hf download --repo-type dataset %s%s%s";
    char command[512];
    snprintf(command, sizeof command, download, repo_id, revision ? " --revision " : "", revision ? revision : "");
    if (!is_directory(repo_dir)) {
        snprintf(
            why, why_size,
            "it is not a path here, and the Hugging Face cache does not hold it (%s: %s; the cache is "
            "HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub); tiertrain never downloads: run `%s` "
            "first, or give a local directory",
            repo_dir, strerror(ENOENT), command);
        return NULL;
    }
    char commit[41];
    if (is_commit_hash(rev)) memcpy(commit, rev, 41);
    else if (!read_ref(repo_dir, rev, commit)) {
        snprintf(why, why_size,
                 "the Hugging Face cache holds %s but no revision '%s' of it (%s/refs/%s is absent or holds no "
                 "commit); run `%s`, or name a revision it holds",
                 repo_dir, rev, repo_dir, rev, command);
        return NULL;
    }
    size_t n = strlen(repo_dir) + 64;
    char *snapshot = tt_xmalloc(n, "a path");
    snprintf(snapshot, n, "%s/snapshots/%s", repo_dir, commit);
    if (!is_directory(snapshot)) {
        snprintf(why, why_size,
                 "the Hugging Face cache's %s points revision '%s' at %s, which is not there (an interrupted "
                 "download?); run `%s` again",
                 repo_dir, rev, snapshot, command);
        free(snapshot);
        return NULL;
    }
    return snapshot;
}

void tt_hf_check_path(const char *name, tt_hf_repo_kind kind, const char *revision, const char *what) {
    free(tt_hf_local_path(name, kind, revision, what));
}

/* name is to be looked for in the cache: no path here, and shaped as a Hub name */
static bool is_hub_name(const char *name) {
    struct stat st;
    return stat(name, &st) != 0 && tt_hf_is_repo_id(name);
}

char *tt_hf_cached_path(const char *name, tt_hf_repo_kind kind, const char *revision) {
    char why[2048];
    return is_hub_name(name) ? tt_hf_cache_snapshot(name, kind, revision, why, sizeof why) : NULL;
}

char *tt_hf_local_path(const char *name, tt_hf_repo_kind kind, const char *revision, const char *what) {
    if (!is_hub_name(name)) return tt_xstrdup(name);
    char why[2048];
    char *snapshot = tt_hf_cache_snapshot(name, kind, revision, why, sizeof why);
    if (!snapshot) tt_die("%s '%s': %s", what, name, why);
    return snapshot;
}
