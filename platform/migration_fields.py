"""Fields that several migrations create alike, written once: frozen as those migrations wrote them.

A migration must mean the same thing for ever, so nothing here follows the models: a later model change gets a
migration of its own, written out in full, and these functions stay as they are. Nothing here imports a model
or a choice set (they change); choices are written out. Each call returns new field instances.

- the primary key of every model that declares none (`create_model`);
- the fields every application kind has (`ApplicationBase`) and every decision (`DecisionBase`);
- the fields an application shares with the object it asks for (topic settings, binding settings), as each
  kind's first migration created them on both models, and those of a provisioned object (topic, binding, grant).

A migration imports this module as `shared` and calls what it needs: `shared.create_model(name=..., fields=[...])`.
"""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def create_model(name, fields, **kwargs):
    """CreateModel of a model with the primary key Django gives a model that declares none (`id`, the
    BigAutoField of DEFAULT_AUTO_FIELD, first), then `fields`."""
    primary_key = ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID'))
    return migrations.CreateModel(name=name, fields=[primary_key, *fields], **kwargs)


def add_fields(model_name, fields):
    """One AddField per (name, field), in order."""
    return [migrations.AddField(model_name=model_name, name=name, field=field) for name, field in fields]


def provisioned(description=True):
    """What a provisioned object (topic, binding, producer grant) keeps about itself, as each kind's first
    migration created it: `description` (not on grants), its revision, status and times."""
    return [
        *([('description', models.TextField(blank=True))] if description else []),
        ('revision', models.PositiveIntegerField(default=1, editable=False)),
        ('status', models.CharField(choices=[('active', 'Active'), ('retired', 'Retired')], default='active', max_length=16)),
        ('created_at', models.DateTimeField(auto_now_add=True)),
        ('updated_at', models.DateTimeField(auto_now=True)),
    ]


# --- every application kind and its decisions -------------------------------------------------------------------


def application_fields():
    """ApplicationBase's own fields, after `id` (and `number`, where the migration creates it too)."""
    return [
        ('state', models.CharField(choices=[('draft', 'Draft'), ('pending', 'Pending approval'), ('approved', 'Approved'), ('rejected', 'Rejected'), ('withdrawn', 'Withdrawn'), ('provisioning', 'Provisioning'), ('active', 'Active'), ('failed', 'Provisioning failed')], db_index=True, default='draft', max_length=16)),
        ('description', models.TextField(blank=True)),
        ('reason', models.TextField(help_text='Why this is needed; the approver reads it.')),
        ('policy_report', models.JSONField(blank=True, default=dict, editable=False)),
        ('required_slots', models.JSONField(blank=True, default=list, editable=False)),
        ('submitted_at', models.DateTimeField(blank=True, null=True)),
        ('decided_at', models.DateTimeField(blank=True, null=True)),
        ('created_at', models.DateTimeField(auto_now_add=True)),
        ('updated_at', models.DateTimeField(auto_now=True)),
    ]


def application_options(*permissions):
    return {'ordering': ['-created_at'], 'permissions': list(permissions), 'abstract': False}


def applicant():
    return models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)


def create_decision(name, relations=()):
    """The CreateModel of a kind's decisions (DecisionBase), with its `relations` (`decision_relations`) or,
    where a later operation adds them, without."""
    fields = [
        ('slot', models.CharField(choices=[('owner', "Owning team's approver"), ('sre', 'SRE (production cluster)')], max_length=16)),
        ('verdict', models.CharField(choices=[('approve', 'Approved'), ('reject', 'Rejected')], max_length=16)),
        ('comment', models.TextField(blank=True)),
        ('created_at', models.DateTimeField(auto_now_add=True)),
        *relations,
    ]
    return create_model(name=name, fields=fields, options={'ordering': ['created_at'], 'abstract': False})


def decision_relations(application):
    """A decision's actor and the application ('app_label.model') it decides."""
    return [
        ('actor', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
        ('application', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='decisions', to=application)),
    ]


# --- topics: Topic and TopicApplication ---------------------------------------------------------------------------


def topic_settings(validate_message_types):
    """What a topic application asks for and its topic keeps (topics 0001), from `name` to `ordered`.
    `validate_message_types` is the validator 0001 names (passed in: this module imports no app code)."""
    return [
        ('name', models.CharField(max_length=120, validators=[django.core.validators.RegexValidator('^[A-Za-z0-9][A-Za-z0-9._-]{0,118}[A-Za-z0-9]$', "Use 2–120 letters, digits, '.', '_' or '-', starting and ending with a letter or digit.")])),
        ('environment', models.CharField(choices=[('dev', 'Development'), ('test', 'Test'), ('staging', 'Staging'), ('prod', 'Production')], max_length=16)),
        ('message_types', models.JSONField(help_text='The message types published on this topic.', validators=[validate_message_types])),
        ('expected_peak_mps', models.PositiveIntegerField(validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(1000000)], verbose_name='expected peak messages/s')),
        ('max_message_bytes', models.PositiveIntegerField(default=65536, validators=[django.core.validators.MinValueValidator(64), django.core.validators.MaxValueValidator(4194304)], verbose_name='maximum message size (bytes)')),
        ('retention_hours', models.PositiveIntegerField(default=72, help_text='How long stored messages are kept (1 hour to 30 days).', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(720)])),
        ('storage_level', models.CharField(choices=[('memory', 'Memory (fast, lost on restart)'), ('file', 'File (durable, fsync group commit)')], default='file', max_length=16)),
        ('transactional', models.BooleanField(default=False, help_text='Producers send two-phase (half) messages.')),
        ('ordered', models.BooleanField(default=False, help_text='Per-key order is kept for consumers.')),
    ]


def topic_relations():
    """The cluster and the owning team, as topics 0001 created them on both models."""
    return [
        ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='clusters.cluster')),
        ('team', models.ForeignKey(help_text='The team that owns the topic and approves who may use it.', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='accounts.team')),
    ]


def topic_tx_checks():
    """The back-check settings of a transactional topic (topics 0002), on both models."""
    return [
        ('tx_check_delay_s', models.PositiveIntegerField(default=6, help_text='A prepared message neither committed nor rolled back is first checked this long after it was prepared.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(3600)], verbose_name='first back-check after (s)')),
        ('tx_check_interval_s', models.PositiveIntegerField(default=30, help_text='The wait between back-checks answered unknown or not answered (doubling, up to 4 times this).', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(3600)], verbose_name='back-check interval (s)')),
        ('tx_check_max', models.PositiveIntegerField(default=15, help_text='After this many unanswered checks the message is rolled back and reported unresolved.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)], verbose_name='maximum back-checks')),
    ]


# --- bindings: Binding and BindingApplication, ProducerGrant and GrantApplication --------------------------------


def binding_settings():
    """What a binding application asks for and its binding keeps (bindings 0001), from `group` to `max_in_flight`."""
    return [
        ('group', models.CharField(max_length=63, validators=[django.core.validators.RegexValidator('^[a-z][a-z0-9_-]{1,62}$', "Use 2–63 characters: lowercase letters, digits, '_' and '-', starting with a letter.")], verbose_name='consumer group')),
        ('selector_kind', models.CharField(choices=[('exact', 'Exact message type'), ('wildcard', 'Wildcard (shell-style, e.g. order.*)'), ('regex', 'Regular expression (full match)')], default='wildcard', max_length=16, verbose_name='selector')),
        ('selector_pattern', models.CharField(default='*', max_length=200, verbose_name='message-type pattern')),
        ('mode', models.CharField(choices=[('clustering', 'Clustering: one consumer of the group per message'), ('broadcast', 'Broadcast: every consumer of the group')], default='clustering', max_length=16, verbose_name='delivery mode')),
        ('delivery_limit', models.PositiveIntegerField(default=16, help_text="Deliveries before a message goes to the group's dead-letter queue.", validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(100)])),
        ('ttl_s', models.PositiveIntegerField(default=86400, help_text='A message not acknowledged this long after it was stored goes to the dead-letter queue.', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(2592000)], verbose_name='TTL (seconds)')),
        ('backoff_initial_ms', models.PositiveIntegerField(default=1000, validators=[django.core.validators.MinValueValidator(10), django.core.validators.MaxValueValidator(3600000)], verbose_name='first retry after (ms)')),
        ('backoff_max_ms', models.PositiveIntegerField(default=60000, validators=[django.core.validators.MinValueValidator(10), django.core.validators.MaxValueValidator(3600000)], verbose_name='longest retry wait (ms)')),
        ('backoff_multiplier', models.FloatField(default=2.0, validators=[django.core.validators.MinValueValidator(1.0), django.core.validators.MaxValueValidator(10.0)], verbose_name='retry backoff multiplier')),
        ('max_in_flight', models.PositiveIntegerField(default=32, help_text='Unacknowledged messages one consumer holds at most (flow control).', validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(10000)], verbose_name='max in flight per consumer')),
    ]


def topic_of_binding(related_name='+'):
    """The topic a binding, a grant or their application is on (bindings 0002)."""
    return models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name=related_name, to='topics.topic')


def app_of_binding(verbose_name=None, related_name='+'):
    """The app a binding, a grant or their application is for (bindings 0002)."""
    extra = {'verbose_name': verbose_name} if verbose_name else {}
    return models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name=related_name, to='topics.app', **extra)
