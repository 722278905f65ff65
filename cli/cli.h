/* cli.h: the verbs of the loupe command, one file each (cli/<verb>.c). Each takes the arguments
 * after the verb (argv[0] is the verb) and returns the process exit status. */
#ifndef LOUPE_CLI_H
#define LOUPE_CLI_H

int loupe_cmd_record(int argc, char **argv);
int loupe_cmd_summary(int argc, char **argv);
int loupe_cmd_convert(int argc, char **argv);
int loupe_cmd_diff(int argc, char **argv);
int loupe_cmd_gpu_decode(int argc, char **argv);
int loupe_cmd_capture(int argc, char **argv);
int loupe_cmd_view(int argc, char **argv);

/* True when stderr is a terminal (progress is shown only then). */
int loupe_cli_tty(void);

#endif
