/* Runs fuzz inputs through one harness without libFuzzer: every file named, and every
 * file in every directory named (in name order). The test suite replays the committed
 * seed corpus and every regression input this way, under the sanitizer build too. */
#include "fuzz_input.h"

#include <dirent.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return -1;
    }
    uint8_t *data = NULL;
    size_t size = 0, cap = 0;
    for (size_t n;; size += n) {
        if (size == cap && !(data = realloc(data, cap = 2 * cap + 4096))) {
            fclose(f);
            return -1;
        }
        if ((n = fread(data + size, 1, cap - size, f)) == 0)
            break;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    return 1;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int replay_dir(const char *dir)
{
    struct dirent **entries;
    int n = scandir(dir, &entries, NULL, by_name), done = 0;
    if (n < 0) {
        fprintf(stderr, "replay: cannot read %s\n", dir);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, entries[i]->d_name);
        struct stat s;
        if (entries[i]->d_name[0] != '.' && stat(path, &s) == 0 && S_ISREG(s.st_mode)) {
            int r = replay_file(path);
            done = r < 0 || done < 0 ? -1 : done + r;
        }
        free(entries[i]);
    }
    free(entries);
    return done;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    int total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat s;
        int r = stat(argv[i], &s) == 0 && S_ISDIR(s.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]);
        if (r < 0)
            return 1;
        total += r;
    }
    printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
